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
// It stops when its standard input closes (the test process went away).

import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.argv[2];
const { OAuth2Server, Events } = await import(
  pathToFileURL(path.join(modules, 'oauth2-mock-server', 'dist', 'index.mjs')).href
);

const server = new OAuth2Server();
await server.issuer.keys.generate('RS256', { kid: 'key-1' });

server.service.on(Events.BeforeTokenSigning, (token, req) => {
  const form = req.body ?? {};
  for (const claim of ['aud', 'scope', 'iss', 'email']) {
    if (form[claim] !== undefined) token.payload[claim] = form[claim];
  }
  if (form.groups !== undefined) token.payload.groups = form.groups.split(',');
  if (form.expires_in !== undefined) {
    token.payload.exp = token.payload.iat + Number(form.expires_in);
    token.payload.nbf = Math.min(token.payload.nbf, token.payload.exp - 1);
  }
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

await server.start(0, '127.0.0.1');
server.issuer.url = `http://127.0.0.1:${server.address().port}`;
console.log(JSON.stringify({ issuer: server.issuer.url }));

process.stdin.resume();
process.stdin.on('end', async () => {
  await server.stop();
  process.exit(0);
});
