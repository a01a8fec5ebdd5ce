// The conversation a page was opened on is asked for while the app still checks the session,
// not after: one round trip less before its first event shows. (A 401 here is harmless: the
// session check shows the sign-in page, and the answer is never used.)

import { api } from "./api";
import type { Conversation } from "./types";

const early = new Map<string, Promise<Conversation>>();

export function prefetchFromPath(path: string) {
  const m = path.match(/^\/c\/([0-9a-f-]{36})$/);
  if (m) {
    const p = api.conversation(m[1]);
    p.catch(() => {});
    early.set(m[1], p);
  }
}

/** The prefetched record of `id`, once. */
export function takePrefetched(id: string): Promise<Conversation> | undefined {
  const p = early.get(id);
  early.delete(id);
  return p;
}
