// A Node preload (`node --require bearer.cjs`) for MCP clients that have no option for a bearer
// token, such as the conformance suite's `conformance server`: every request the process makes
// with fetch carries `Authorization: Bearer $LARKGATE_CONFORMANCE_TOKEN`, unless it sets one of
// its own. Nothing in larkgate is loosened for it: the suite signs in as a principal does.
"use strict";

const token = process.env.LARKGATE_CONFORMANCE_TOKEN;
if (!token) {
  throw new Error("bearer.cjs: set LARKGATE_CONFORMANCE_TOKEN to the token to send");
}
const fetchWithoutToken = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const given = init.headers ?? (input instanceof Request ? input.headers : undefined);
  const headers = new Headers(given);
  if (!headers.has("authorization")) {
    headers.set("authorization", `Bearer ${token}`);
  }
  return fetchWithoutToken(input, { ...init, headers });
};
