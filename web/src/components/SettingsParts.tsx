// The parts every settings page is made of: a labelled field, a titled section, a list read
// from the API, a delete that asks first, and a change that asks for a recent sign-in when the
// API wants one (`POST /session/step-up`) and is then made again.

import { cloneElement, useId, useState, type ReactElement, type ReactNode } from "react";
import { api, ApiError, errorText } from "../api";
import { useItems } from "../resource";

export type Row = Record<string, unknown> & { name: string };
export const str = (v: unknown) => (v === undefined || v === null ? "" : String(v));

/** Runs a change; a `step_up_required` answer asks for the key, then runs it again. */
export function useChange(reload: () => void) {
  const [error, setError] = useState<string>();
  const [stepUp, setStepUp] = useState<() => Promise<unknown>>();
  const run = async (f: () => Promise<unknown>) => {
    try {
      await f();
      setError(undefined);
      reload();
      return true;
    } catch (e) {
      if (e instanceof ApiError && e.code === "step_up_required") setStepUp(() => f);
      else setError(errorText(e));
      return false;
    }
  };
  const prompt = stepUp && (
    <StepUp
      onDone={async (key) => {
        try {
          await api.stepUp(key);
          const f = stepUp;
          setStepUp(undefined);
          await run(f);
        } catch (e) {
          setError(errorText(e));
        }
      }}
      onCancel={() => setStepUp(undefined)}
    />
  );
  return { error, run, prompt, setError };
}

function StepUp({ onDone, onCancel }: { onDone: (key: string) => void; onCancel: () => void }) {
  const [key, setKey] = useState("");
  return (
    <form
      className="card step-up"
      aria-label="Confirm it is you"
      onSubmit={(e) => {
        e.preventDefault();
        onDone(key);
      }}
    >
      <p>This change needs a recent sign-in. Enter your API key to go on.</p>
      <Field label="API key">
        <input type="password" value={key} onChange={(e) => setKey(e.target.value)} autoComplete="off" required />
      </Field>
      <button type="submit">Confirm</button>
      <button type="button" className="ghost" onClick={onCancel}>
        Cancel
      </button>
    </form>
  );
}

/** A labelled control: the label names the control alone (not its options). */
export function Field({ label, children }: { label: string; children: ReactElement<{ id?: string }> }) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {cloneElement(children, { id })}
    </div>
  );
}

/** A settings list: its items, the error of its last read, and a reload. */
export function useList<T = Row>(load: () => Promise<{ items: T[] }>) {
  const list = useItems(load);
  return { items: list.data, loadError: list.error, reload: list.reload };
}

export function Section({ id, title, children }: { id: string; title: string; children: ReactNode }) {
  return (
    <section className="card settings-section" aria-labelledby={`h-${id}`} id={id}>
      <h2 id={`h-${id}`}>{title}</h2>
      {children}
    </section>
  );
}

export function DeleteButton({ what, onDelete }: { what: string; onDelete: () => void }) {
  const [asking, setAsking] = useState(false);
  return asking ? (
    <span role="group" aria-label={`Confirm deleting ${what}`}>
      <button className="danger" onClick={onDelete}>
        Delete
      </button>
      <button className="ghost" onClick={() => setAsking(false)}>
        Keep
      </button>
    </span>
  ) : (
    <button className="ghost" aria-label={`Delete ${what}`} onClick={() => setAsking(true)}>
      Delete
    </button>
  );
}
