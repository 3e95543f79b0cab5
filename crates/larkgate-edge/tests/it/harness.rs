//! One edge on `127.0.0.1:0`, served by [`larkgate_edge::accept::serve`] in this process.

use std::net::SocketAddr;
use std::sync::Arc;

use larkgate_edge::accept::ConnectionMetrics;
use larkgate_edge::routes::{EdgeParts, assemble};
use larkgate_edge::server::ServerConfig;
use larkgate_platform::audit::{AuditLog, AuditOptions};
use larkgate_platform::clock::{SystemClock, WallClock};
use larkgate_platform::policy::Policy;
use larkgate_platform::{Platform, tokens};
use larkgate_scripts::{RunBounds, Scripts, Workers};
use larkgate_store::{IssuerBinding, Principal, PrincipalKind, SqliteStore, Store, now_ms};
use larkgate_upstream::SystemResolver;
use larkgate_upstream::federation::Federation;

/// An `initialize` request of the 2025-11-25 revision, id 1.
pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// The policy behind the edge by default: `admin` calls everything, `reader` the reads.
pub(crate) const POLICY: &str = r#"
[roles.admin]
call = ["*"]

[roles.reader]
call = ["kv_get", "clock_now"]
"#;

/// The principals by default: `admin` (the admin role) and `bob` (reader).
pub(crate) const PRINCIPALS: &[(&str, &[&str])] = &[("admin", &["admin"]), ("bob", &["reader"])];

/// Adds `principals`, each with its roles, to `store`.
pub(crate) async fn add_principals(store: &dyn Store, principals: &[(&str, &[&str])]) {
    for (id, roles) in principals {
        store
            .add_principal(Principal {
                id: (*id).to_owned(),
                kind: PrincipalKind::User,
                roles: roles.iter().map(|r| r.to_string()).collect(),
                issuer: IssuerBinding::Local,
            })
            .await
            .unwrap();
    }
}

/// The workspace's root.
pub(crate) fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) struct Edge {
    /// Keeps the data directory alive for the test's duration.
    _dir: tempfile::TempDir,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) audit: Arc<AuditLog>,
    /// The platform behind the edge.
    pub(crate) platform: Platform,
    /// `http://127.0.0.1:PORT/mcp`.
    pub(crate) url: String,
    /// The sessions the edge holds.
    pub(crate) sessions: Arc<larkgate_edge::sessions::Registry>,
    stop: tokio::sync::watch::Sender<bool>,
    served: tokio::task::JoinHandle<()>,
}

impl Edge {
    /// The edge under `[server]` as `server` (TOML) says, on [`POLICY`] with [`PRINCIPALS`].
    pub(crate) async fn start(server: &str) -> Self {
        Self::with(POLICY, server, PRINCIPALS).await
    }

    /// The edge on `policy` (the `[policy]` section's TOML) and `[server]` as `server` says,
    /// with `principals` (each with its roles) in the store.
    pub(crate) async fn with(policy: &str, server: &str, principals: &[(&str, &[&str])]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).unwrap());
        add_principals(store.as_ref(), principals).await;
        Self::serve(dir, store, policy, server, Arc::new(SystemClock)).await
    }

    /// One replica of several: the edge on `store`, which they share (its principals added
    /// already), its time of day `clock`, with a data directory (its audit journal) of its own.
    pub(crate) async fn replica(
        store: Arc<dyn Store>,
        clock: Arc<dyn WallClock>,
        policy: &str,
        server: &str,
    ) -> Self {
        Self::serve(tempfile::tempdir().unwrap(), store, policy, server, clock).await
    }

    async fn serve(
        dir: tempfile::TempDir,
        store: Arc<dyn Store>,
        policy: &str,
        server: &str,
        clock: Arc<dyn WallClock>,
    ) -> Self {
        let audit = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
            .await
            .unwrap();
        let policy: Policy = toml::from_str(policy).unwrap();
        let platform = Platform::builder(store.clone(), audit.clone())
            .unwrap()
            .policy(policy)
            .wall_clock(clock)
            .build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listen: SocketAddr = listener.local_addr().unwrap();
        let federation = Federation::start(
            &platform,
            Vec::new(),
            Arc::new(SystemResolver),
            Some(listen),
        )
        .await
        .unwrap();
        let workers = Workers::Fresh(larkgate_script::WorkerCommand {
            program: env!("CARGO_BIN_EXE_larkgate-edge-worker").into(),
            address_space: larkgate_script::worker::DEFAULT_ADDRESS_SPACE,
        });
        let scripts = Scripts::start(
            platform.clone(),
            store.clone(),
            audit.clone(),
            workers,
            RunBounds::default(),
        )
        .await
        .unwrap();
        let server: ServerConfig = toml::from_str(server).unwrap();
        let sign_in = Default::default();
        let edge = assemble(EdgeParts {
            platform: platform.clone(),
            store: store.clone(),
            audit: audit.clone(),
            scripts,
            federation,
            server: &server,
            sign_in: &sign_in,
            listen,
        })
        .unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let served = tokio::spawn(larkgate_edge::accept::serve(
            listener,
            edge.router,
            server.sockets(),
            ConnectionMetrics::default(),
            stopped,
        ));
        Edge {
            _dir: dir,
            store,
            audit,
            platform,
            url: format!("http://{listen}/mcp"),
            sessions: edge.sessions,
            stop,
            served,
        }
    }

    /// A new token for `principal`, made through the store as `larkgate token create` does.
    pub(crate) async fn token(&self, principal: &str) -> String {
        tokens::create(self.store.as_ref(), principal, "admin", None, now_ms())
            .await
            .unwrap()
            .token
    }

    /// A POST of `body` to `/mcp` with `token`, and with `headers`.
    pub(crate) async fn post(
        &self,
        token: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> reqwest::Response {
        let mut request = reqwest::Client::new()
            .post(&self.url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(body.to_owned()).send().await.unwrap()
    }

    /// Stops serving and waits until every connection is closed.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        self.served.await.unwrap();
    }
}
