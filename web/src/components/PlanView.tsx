// The agent's plan, live: the task list its `task_tracker` tool set last (each `task_list`
// event replaces the one before), in order, with where each task stands.

import { useMemo } from "react";
import type { HalyardEvent, TaskItem } from "../types";

const LABEL: Record<TaskItem["status"], string> = { todo: "to do", in_progress: "in progress", done: "done" };

/** The plan the events hold last (none before the agent made one). */
export function latestPlan(events: HalyardEvent[]): TaskItem[] | undefined {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i];
    if (e.kind === "task_list") return e.items;
  }
  return undefined;
}

export function PlanView({ events }: { events: HalyardEvent[] }) {
  const plan = useMemo(() => latestPlan(events), [events]);
  if (!plan || plan.length === 0) return <p className="muted">The agent has made no plan yet.</p>;
  const done = plan.filter((t) => t.status === "done").length;
  return (
    <section className="plan" aria-label="Plan">
      <h2>Plan</h2>
      <p className="muted small" data-testid="plan-progress">
        {done} of {plan.length} done
      </p>
      <ol>
        {plan.map((t, i) => (
          <li key={i} className={`task t-${t.status}`} data-testid="plan-task">
            <span className={`badge s-${t.status}`}>{LABEL[t.status] ?? t.status}</span> <span className="task-title">{t.title}</span>
            {t.notes && <div className="muted small task-notes">{t.notes}</div>}
          </li>
        ))}
      </ol>
    </section>
  );
}
