//! An OAuth-protected upstream through the binaries, as an operator runs it: `larkgate upstream
//! login` (or `upstream add --oauth`) beside a running `larkgate serve`, the tokens refreshed
//! when they expire, and a refused refresh shown in `upstream list` with what to do.
//!
//! The protected upstream is a second `larkgate serve` (an OAuth 2.1 resource server with
//! protected resource metadata) that trusts a real authorization server process
//! (`tests/peers/identity_provider.mjs`, on the npm package `oauth2-mock-server`: PKCE, refresh
//! tokens, RS256 tokens whose audience is the resource asked for). Whoever opens the
//! authorization URL is signed in as `johndoe` at once; the browser is [`browse`].

use std::io::{BufRead, BufReader, Read as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::ok;
use crate::serve::{Server, admin_gateway, admin_gateway_with_env};
use crate::sign_in::{Provider, sign_in_config};
use crate::traces::call;

/// The operator's credential key (32 bytes, base64).
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// The protected upstream: a gateway trusting `provider`, where its user `johndoe` may call
/// `clock_now`.
fn protected(provider: &Provider) -> (tempfile::TempDir, Server) {
    protected_with(provider, "")
}

/// [`protected`], with `settings` added to its `[[sign_in.issuers]]` entry.
fn protected_with(provider: &Provider, settings: &str) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = sign_in_config(&provider.issuer).replace(
        "key_refetch_seconds = 1\n",
        &format!("key_refetch_seconds = 1\n{settings}"),
    );
    assert!(config.contains(settings));
    std::fs::write(crate::config_path(d), config).unwrap();
    ok(
        d,
        &[
            "principal",
            "add",
            "johndoe",
            "--issuer",
            "idp",
            "--roles",
            "author",
        ],
    );
    let server = Server::start(d);
    (dir, server)
}

/// `[[upstreams]]` for the protected gateway at `url`, signed in to as the client `larkgate`
/// (registered with the provider beforehand).
fn upstream_config(url: &str) -> String {
    format!(
        "[[upstreams]]\nalias = \"inner\"\nurl = \"{url}\"\nallow = [\"127.0.0.1\"]\n\
         approval = \"never\"\n[upstreams.oauth]\nclient_id = \"larkgate\"\n"
    )
}

/// A gateway on `config` with an admin and its token, started with the credential key.
fn gateway(config: &str) -> (tempfile::TempDir, Server, String) {
    admin_gateway_with_env(config, &[("LARKGATE_CREDENTIAL_KEY", KEY)])
}

/// What a person's browser does with the authorization URL: the provider signs them in and
/// redirects to larkgate's loopback redirect URI, which answers. `meanwhile` runs between the
/// two.
fn browse(authorization_url: &str, meanwhile: impl FnOnce()) {
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let answer = http.get(authorization_url).send().unwrap();
    assert_eq!(answer.status(), 302, "{authorization_url}");
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        location.starts_with("http://127.0.0.1:") && location.contains("/callback?code="),
        "the provider redirects to larkgate's loopback port: {location}"
    );
    meanwhile();
    let page = http.get(&location).send().unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.text()
            .unwrap()
            .contains("the sign-in reached larkgate")
    );
}

/// Runs `larkgate ARGS` in `d` with the credential key, plays the person at the browser with
/// the URL it prints, and answers whether it succeeded and everything it printed.
fn signing_in(d: &Path, args: &[&str]) -> (bool, String) {
    signing_in_while(d, args, &[], || {})
}

/// [`signing_in`], running `meanwhile` after the person signed in at the provider and before
/// the browser reaches larkgate.
fn signing_in_while(
    d: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    meanwhile: impl FnOnce(),
) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(d)
        .args(args)
        .env("LARKGATE_CREDENTIAL_KEY", KEY)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    let mut meanwhile = Some(meanwhile);
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        printed.push_str(&line);
        if line.starts_with("http://") {
            browse(line.trim(), meanwhile.take().expect("one sign-in"));
        }
    }
    let status = child.wait().unwrap();
    let mut errors = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut errors)
        .unwrap();
    printed.push_str(&errors);
    (status.success(), printed)
}

/// `upstream list` on `d` (beside its running gateway) once it shows `inner` with `wanted`,
/// within 20 seconds.
fn listed_with(d: &Path, wanted: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = ok(d, &["upstream", "list"]);
        if listed
            .lines()
            .any(|l| l.starts_with("inner") && l.contains(wanted))
        {
            return listed;
        }
        assert!(Instant::now() < deadline, "never {wanted:?}: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (up to 30 s) for the gateway's log line containing `text`.
fn logged(server: &Server, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if server.next_stderr_line().contains(text) {
            return;
        }
    }
    panic!("serve never logged {text:?}");
}

/// Waits (up to 20 s: a running gateway writes its audit records in batches) for a record of
/// `d`'s audit log that `wanted` matches.
fn audited(d: &Path, wanted: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tail = ok(d, &["audit", "tail", "-n", "50"]);
        if tail.lines().any(&wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "not audited: {tail}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `inner__clock_now` through the gateway at `url`: its result.
fn clock(url: &str, token: &str) -> Value {
    call(url, token, None, None, "inner__clock_now", json!({}))
}

#[test]
fn upstream_login_beside_a_running_gateway_connects_the_upstream_and_its_token_reaches_it() {
    let provider = Provider::start();
    let (upstream_dir, upstream) = protected(&provider);
    let (dir, server, token) = gateway(&upstream_config(&upstream.url));
    let d = dir.path();

    // Nobody signed in yet: down, saying what to run.
    let listed = listed_with(d, "down:");
    assert!(
        listed.contains(
            "nobody has signed in to it yet: an operator runs `larkgate upstream login inner`"
        ),
        "{listed}"
    );

    let (signed, printed) = signing_in(d, &["upstream", "login", "inner"]);
    assert!(signed, "{printed}");
    assert!(
        printed.contains("open this URL in a browser on this machine to sign in to inner")
            && printed.contains(
                "signed in to inner; the tokens are stored sealed; the running larkgate \
                 follows within a second"
            ),
        "{printed}"
    );
    // The running gateway noticed the sign-in rather than waiting out its backoff.
    logged(&server, "someone signed in to a down upstream");
    listed_with(d, "connected");
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");

    // The upstream saw the provider's user, by the token larkgate signed in for.
    audited(upstream_dir.path(), |l| {
        l.contains("clock_now") && l.contains("johndoe")
    });
    // The sign-in is an audit event under the admin who ran it (the host's operator).
    audited(d, |l| {
        l.contains("upstream_signed_in") && l.contains("operator") && l.contains("\"inner\"")
    });
    // Sealed at rest: no token (a JWT starts `eyJ`) anywhere in the gateway's data directory,
    // read once the gateway has stopped (while it runs, journal segments come and go).
    assert!(server.stop().success());
    let data = d.join("larkgate-data");
    for entry in std::fs::read_dir(&data).unwrap().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap();
        assert!(
            !bytes.windows(4).any(|w| w == b"eyJh"),
            "{} holds a token in the clear",
            entry.path().display()
        );
    }
    drop(upstream);
}

/// Moves upstream `inner`'s stored sign-in in `d` a day into the past, as if it had been made
/// then: the running gateway's next call through it finds the token due and refreshes it (rmcp
/// reads the stored sign-in at every request and decides from its time of receipt), without the
/// test waiting out a token's life. The provider's tokens live an hour.
fn age_sign_in(d: &Path) {
    use larkgate_upstream::credentials::{CredentialKey, SealedCredentials};
    use rmcp::transport::auth::CredentialStore as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = larkgate_store::SqliteStore::open(&d.join("larkgate-data")).unwrap();
        let key = Arc::new(CredentialKey::from_base64(KEY).unwrap());
        let stored = SealedCredentials::new(Arc::new(store), "inner", key);
        let mut credentials = stored.load().await.unwrap().expect("a stored sign-in");
        let received = credentials
            .token_received_at
            .expect("rmcp records when a token was received");
        credentials.token_received_at = Some(received - 24 * 3600);
        stored.save(credentials).await.unwrap();
    });
}

#[test]
fn expiring_tokens_are_refreshed_and_a_refused_refresh_is_shown_until_someone_signs_in_again() {
    let provider = Provider::start();
    provider.set("/test/lifetime", &[("seconds", "3600")]);
    let (_upstream_dir, upstream) = protected(&provider);
    let (dir, server, token) = gateway(&upstream_config(&upstream.url));
    let d = dir.path();
    let (signed, printed) = signing_in(d, &["upstream", "login", "inner"]);
    assert!(signed, "{printed}");
    listed_with(d, "connected");
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert!(
        !provider.grants().contains(&"refresh_token".to_owned()),
        "nothing was due yet: {:?}",
        provider.grants()
    );

    // Past its life, the token is refreshed and the call answered.
    age_sign_in(d);
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert!(
        provider.grants().contains(&"refresh_token".to_owned()),
        "{:?}",
        provider.grants()
    );

    // The provider now refuses refreshes (a revoked grant): the upstream is down with the
    // cause and what to do, its tool answers upstream_unavailable.
    provider.set("/test/refresh", &[("refuse", "true")]);
    age_sign_in(d);
    let refused = clock(&server.url, &token);
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let listed = listed_with(d, "down:");
    assert!(
        listed.contains("could not be refreshed")
            && listed.contains("signs in again with `larkgate upstream login inner`"),
        "{listed}"
    );
    let refused = clock(&server.url, &token);
    let envelope = &refused["result"]["_meta"]["larkgate/envelope"];
    assert_eq!(envelope["code"], "upstream_unavailable", "{refused}");

    // Signing in again brings it back without a restart.
    let (signed, printed) = signing_in(d, &["upstream", "login", "inner"]);
    assert!(signed, "{printed}");
    listed_with(d, "connected");
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert!(server.stop().success());
}

/// Proxy variables in the environment of `upstream login` and of serve carry none of the
/// OAuth requests (metadata, registration, token, refresh) nor the upstream call with its
/// token: they go where the upstream and its authorization server are.
#[test]
fn proxy_variables_in_the_environment_carry_no_sign_in_no_refresh_and_no_token() {
    let provider = Provider::start();
    provider.set("/test/lifetime", &[("seconds", "3600")]);
    let (_upstream_dir, upstream) = protected(&provider);
    let proxy = crate::Proxy::start();
    let mut env = proxy.env();
    env.push(("LARKGATE_CREDENTIAL_KEY", KEY));
    let (dir, server, token) = admin_gateway_with_env(&upstream_config(&upstream.url), &env);
    let d = dir.path();
    let (signed, printed) = signing_in_while(d, &["upstream", "login", "inner"], &env, || {});
    assert!(signed, "{printed}");
    listed_with(d, "connected");
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    age_sign_in(d);
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert!(
        provider.grants().contains(&"refresh_token".to_owned()),
        "{:?}",
        provider.grants()
    );
    assert_eq!(proxy.connections(), 0, "a request went to the proxy");
    assert!(server.stop().success());
}

#[test]
fn a_token_the_upstream_refuses_before_its_stated_expiry_is_refreshed_on_the_401() {
    let provider = Provider::start();
    // Tokens die after two seconds, though the provider says they last an hour; the upstream
    // allows no clock skew, so it answers 401 to a token larkgate holds for valid.
    provider.set("/test/lifetime", &[("seconds", "2"), ("claimed", "3600")]);
    let (_upstream_dir, upstream) = protected_with(&provider, "leeway_seconds = 0\n");
    let (dir, server, token) = gateway(&upstream_config(&upstream.url));
    let d = dir.path();
    let (signed, printed) = signing_in(d, &["upstream", "login", "inner"]);
    assert!(signed, "{printed}");
    listed_with(d, "connected");
    let refreshes = |grants: Vec<String>| grants.iter().filter(|g| *g == "refresh_token").count();
    let before = refreshes(provider.grants());

    std::thread::sleep(Duration::from_secs(3));
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert!(
        refreshes(provider.grants()) > before,
        "no refresh on the 401: {:?}",
        provider.grants()
    );
    listed_with(d, "connected");
    assert!(server.stop().success());
}

#[test]
fn upstream_add_with_oauth_signs_in_first_and_keeps_nothing_when_that_fails() {
    let provider = Provider::start();
    let (_upstream_dir, upstream) = protected(&provider);
    let (dir, server, token) = admin_gateway("");
    let d = dir.path();
    let url = upstream.url.clone();
    let add = |alias: &'static str| {
        vec![
            "upstream",
            "add",
            alias,
            &url,
            "--allow",
            "127.0.0.1",
            "--approval",
            "never",
            "--oauth",
            "--client-id",
            "larkgate",
        ]
    };

    // A literal client secret would be stored with the upstream: refused, with what to write,
    // before anyone is asked to sign in.
    let mut literal = add("inner");
    literal.extend(["--client-secret", "hunter2"]);
    let (added, printed) = signing_in(d, &literal);
    assert!(!added);
    assert!(
        printed.contains("--client-secret '${VAULT_CLIENT_SECRET}'")
            && !printed.contains("open this URL"),
        "{printed}"
    );

    let (added, printed) = signing_in(d, &add("inner"));
    assert!(added, "{printed}");
    assert!(
        printed.contains("sign in to inner") && printed.contains("saved; its tool definitions"),
        "{printed}"
    );
    // This gateway was started without the key: it cannot open the tokens, and says so.
    let listed = listed_with(d, "down:");
    assert!(listed.contains("LARKGATE_CREDENTIAL_KEY"), "{listed}");
    assert!(server.stop().success());
    let server = Server::start_with_env(d, &[("LARKGATE_CREDENTIAL_KEY", KEY)]);
    let answered = clock(&server.url, &token);
    assert_eq!(answered["result"]["isError"], false, "{answered}");

    // Signed in, but the server is gone before its tools are listed: nothing of the upstream
    // is kept, its tokens neither.
    let (added, printed) = signing_in_while(d, &add("gone"), &[], || drop(upstream));
    assert!(!added, "{printed}");
    assert!(printed.contains("gone: cannot connect"), "{printed}");
    let listed = ok(d, &["upstream", "list"]);
    assert!(!listed.contains("gone"), "{listed}");
    let store = rusqlite::Connection::open(d.join("larkgate-data/larkgate.sqlite3")).unwrap();
    let kept: Vec<String> = store
        .prepare("SELECT alias FROM upstream_credentials")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(kept, ["inner"]);
    assert!(server.stop().success());
}
