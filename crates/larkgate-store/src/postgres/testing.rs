//! For tests, here and in the crates above: a PostgreSQL schema of its own per test, dropped
//! when the test ends (also when it fails), on the server `LARKGATE_TEST_POSTGRES_URL` names
//! (default `postgres://postgres@127.0.0.1:5432/test`, trust authentication, as on the
//! machines larkgate is built on). Not part of larkgate's interface.

use std::time::Duration;

use tokio_postgres::NoTls;

use super::PostgresSettings;

/// The environment variable naming the test server.
pub const URL_ENV: &str = "LARKGATE_TEST_POSTGRES_URL";
/// The test server when the variable is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The test server's URL.
pub fn url() -> String {
    std::env::var(URL_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// What a test says when the server is not there: what it needs, and how to start it.
pub fn unreachable_message(url: &str, error: &dyn std::fmt::Display) -> String {
    format!(
        "these tests need PostgreSQL at {url} (or where {URL_ENV} points), which cannot be \
         reached: {error}. Start one with trust authentication and a database `test`, for \
         example `docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust \
         -e POSTGRES_DB=test postgres:15`, or on Debian `apt-get install postgresql` and \
         `createdb test`"
    )
}

/// A schema of its own on the test server, dropped with everything in it when this is
/// dropped.
#[derive(Debug)]
pub struct TestSchema {
    url: String,
    name: String,
}

impl TestSchema {
    /// Creates a fresh, empty schema. Panics with [`unreachable_message`] if the server
    /// cannot be reached.
    pub async fn create() -> TestSchema {
        let url = url();
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).expect("randomness");
        let name = format!("lgtest_{}", hex::encode(random));
        let client = connect(&url).await;
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .unwrap_or_else(|e| panic!("cannot create the test schema {name}: {e}"));
        TestSchema { url, name }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Store settings for this schema (short timeouts, so a test of a failure fails fast).
    pub fn settings(&self) -> PostgresSettings {
        PostgresSettings {
            schema: self.name.clone(),
            busy_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(3),
            ..PostgresSettings::new(self.url.clone())
        }
    }

    /// Runs `sql` in the schema, as another program sharing the database would.
    pub async fn execute(&self, sql: &str) {
        let client = connect(&self.url).await;
        client
            .batch_execute(&format!("SET search_path = {}; {sql}", self.name))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A connection to the schema, as another program sharing the database would hold.
    pub async fn client(&self) -> tokio_postgres::Client {
        let client = connect(&self.url).await;
        client
            .batch_execute(&format!("SET search_path = {}", self.name))
            .await
            .expect("search_path");
        client
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable_message(url, &e)));
    tokio::spawn(connection);
    client
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // On a thread of its own: the test's runtime may be the one this thread drives.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url, NoTls).await?;
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("the test schema {} could not be dropped", self.name);
        }
    }
}

/// A TCP relay in front of the test server, on `127.0.0.1:0`, that a test can cut (every
/// connection through it closed, new ones refused) and restore: the database going away and
/// coming back, as larkgate sees it, without touching the server other tests share.
#[derive(Debug)]
pub struct Relay {
    address: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Starts relaying to the test server's host and port.
    pub async fn start() -> Relay {
        use std::sync::atomic::Ordering;
        let config: tokio_postgres::Config = url().parse().expect("the test URL parses");
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let target = format!("{host}:{port}");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let address = listener.local_addr().expect("an address");
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let task = {
            let up = up.clone();
            let cut = cut.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        return;
                    };
                    if !up.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let target = target.clone();
                    let mut cut = cut.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            _ = cut.changed() => {}
                        }
                    });
                }
            })
        };
        Relay {
            address,
            up,
            cut,
            task,
        }
    }

    /// The test URL, pointed at the relay.
    pub fn url(&self) -> String {
        let config: tokio_postgres::Config = url().parse().expect("the test URL parses");
        let user = config.get_user().unwrap_or("postgres").to_owned();
        let dbname = config.get_dbname().unwrap_or("test").to_owned();
        format!("postgres://{user}@{}/{dbname}", self.address)
    }

    /// The database goes away: connections through the relay close, new ones are refused.
    pub fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    /// The database comes back.
    pub fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
        self.cut.send_modify(|n| *n += 1);
    }
}
