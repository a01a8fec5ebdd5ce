// What a page reads from the API and changes through it, in one hook: the value once loaded, the
// error in words (of the last read or change), whether a read is under way, a reload, and a
// `run` for changes that reads again after each. A read that an older one overtakes is dropped,
// so a page whose filters changed never shows the answer to the filters before.

import { useCallback, useEffect, useRef, useState, type DependencyList } from "react";
import { errorText } from "./api";

export interface Resource<T> {
  /** The last value read (`initial` until the first read answers). */
  data: T;
  /** The last read's or change's error, in words; `undefined` once one succeeds. */
  error: string | undefined;
  loading: boolean;
  reload: () => Promise<void>;
  /** Runs a change, then reads again; `false` (and `error` set) when the change failed. */
  run: (change: () => Promise<unknown>) => Promise<boolean>;
  setData: (data: T) => void;
  setError: (error: string | undefined) => void;
}

/** Reads `load()` now and whenever `deps` change. */
export function useResource<T>(load: () => Promise<T>, deps: DependencyList, initial: T): Resource<T> {
  const [data, setData] = useState<T>(initial);
  const [error, setError] = useState<string>();
  const [loading, setLoading] = useState(true);
  const latest = useRef(0);
  // eslint-disable-next-line react-hooks/exhaustive-deps
  const read = useCallback(load, deps);
  const reload = useCallback(async () => {
    const mine = ++latest.current;
    setLoading(true);
    try {
      const value = await read();
      if (mine === latest.current) (setData(value), setError(undefined));
    } catch (e) {
      if (mine === latest.current) setError(errorText(e));
    } finally {
      if (mine === latest.current) setLoading(false);
    }
  }, [read]);
  useEffect(() => {
    reload();
  }, [reload]);
  const run = useCallback(
    async (change: () => Promise<unknown>) => {
      try {
        await change();
        setError(undefined);
      } catch (e) {
        setError(errorText(e));
        return false;
      }
      await reload();
      return true;
    },
    [reload],
  );
  return { data, error, loading, reload, run, setData, setError };
}

/** A list the API answers as `{ items }`. */
export function useItems<T>(load: () => Promise<{ items: T[] }>, deps: DependencyList = []): Resource<T[]> {
  return useResource(async () => (await load()).items, deps, [] as T[]);
}
