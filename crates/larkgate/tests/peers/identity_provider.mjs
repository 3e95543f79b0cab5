// An OpenID Connect provider for larkgate's sign-in tests: oauth2-mock-server (pinned in
// scripts/node-package.json), which signs real RS256 JWTs and publishes its keys at /jwks and
// its discovery document at /.well-known/openid-configuration.
//
// Usage: node identity_provider.mjs NODE_MODULES
//
// Prints one line, {"issuer": "http://127.0.0.1:PORT"}, once it listens. Then:
// - POST /token (the provider's own endpoint) with grant_type=password and username=SUB issues
//   an access token for SUB; these form fields, when present, set claims of the token: aud,
//   groups (comma-separated), scope, iss, email, expires_in (seconds from now; negative for an
//   expired token);
// - POST /test/rotate with kid=KID adds a new RS256 key with that id (published at once) and
//   signs the access tokens issued after it with that key (the `kid` header says which);
// - GET /test/public-key?kid=KID answers that key's public JWK (for crafting forged tokens).
// As an authorization server for an OAuth client (larkgate's upstream sign-in): GET /authorize
// redirects at once with a code for the user `johndoe` (nobody is asked), PKCE is checked, a
// token's `aud` is the `resource` (RFC 8707) it was asked for, which a refresh keeps; and
// - POST /test/lifetime with seconds=N makes later tokens expire N seconds after issue (and
//   claimed=M, when given, has the token response say they expire in M seconds: a token
//   refused before the client expected);
// - POST /test/refresh with refuse=true|false refuses later refreshes (invalid_grant) or not;
// - GET /test/grants answers the grant_type of every token request so far, in order.
// It stops when its standard input closes (the test process went away).

import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.argv[2];
const { OAuth2Server, Events } = await import(
  pathToFileURL(path.join(modules, 'oauth2-mock-server', 'dist', 'index.mjs')).href
);

const server = new OAuth2Server();
await server.issuer.keys.generate('RS256', { kid: 'key-1' });

// What a refresh token was issued for: the resource a refresh keeps as the token's audience.
const resourceOf = new Map();
let lifetime; // seconds, or the provider's default
let claimed; // the expires_in token responses say, when not the lifetime
let refuseRefresh = false;
const grants = [];

server.service.on(Events.BeforeTokenSigning, (token, req) => {
  const form = req.body ?? {};
  const resource = form.resource ?? resourceOf.get(form.refresh_token);
  if (resource !== undefined && form.aud === undefined) token.payload.aud = resource;
  if (lifetime !== undefined) token.payload.exp = token.payload.iat + lifetime;
  for (const claim of ['aud', 'scope', 'iss', 'email']) {
    if (form[claim] !== undefined) token.payload[claim] = form[claim];
  }
  if (form.groups !== undefined) token.payload.groups = form.groups.split(',');
  if (form.expires_in !== undefined) {
    token.payload.exp = token.payload.iat + Number(form.expires_in);
    token.payload.nbf = Math.min(token.payload.nbf, token.payload.exp - 1);
  }
});

server.service.on(Events.BeforeResponse, (response, req) => {
  const form = req.body ?? {};
  grants.push(form.grant_type);
  if (form.grant_type === 'refresh_token' && refuseRefresh) {
    response.statusCode = 400;
    response.body = { error: 'invalid_grant', error_description: 'the refresh token was revoked' };
    return;
  }
  const resource = form.resource ?? resourceOf.get(form.refresh_token);
  if (response.body.refresh_token !== undefined && resource !== undefined) {
    resourceOf.set(response.body.refresh_token, resource);
  }
  if (lifetime !== undefined) response.body.expires_in = claimed ?? lifetime;
});

const json = (res, status, body) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

server.service.addRoute('POST', '/test/rotate', async (req, res) => {
  const jwk = await server.issuer.keys.generate('RS256', { kid: req.body.kid });
  // The store hands out its keys in turn, first the one at its front; moving every other key
  // behind the new one puts it in front, and each token request (an access token, then an ID
  // token) leaves that order as it found it.
  for (const key of server.issuer.keys.toJSON()) {
    if (key.kid !== jwk.kid) server.issuer.keys.get(key.kid);
  }
  json(res, 200, { kid: jwk.kid });
});

server.service.addRoute('GET', '/test/public-key', async (req, res) => {
  const key = server.issuer.keys.toJSON().find((k) => k.kid === req.query.kid);
  json(res, key ? 200 : 404, key ?? {});
});

server.service.addRoute('POST', '/test/lifetime', async (req, res) => {
  lifetime = Number(req.body.seconds);
  claimed = req.body.claimed === undefined ? undefined : Number(req.body.claimed);
  json(res, 200, { lifetime, claimed });
});

server.service.addRoute('POST', '/test/refresh', async (req, res) => {
  refuseRefresh = req.body.refuse === 'true';
  json(res, 200, { refuse: refuseRefresh });
});

server.service.addRoute('GET', '/test/grants', async (req, res) => {
  json(res, 200, grants);
});

await server.start(0, '127.0.0.1');
server.issuer.url = `http://127.0.0.1:${server.address().port}`;
console.log(JSON.stringify({ issuer: server.issuer.url }));

process.stdin.resume();
process.stdin.on('end', async () => {
  await server.stop();
  process.exit(0);
});
