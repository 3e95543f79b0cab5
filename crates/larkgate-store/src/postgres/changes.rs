//! Changes made through any process that shares this schema, as they commit: a connection of
//! its own `LISTEN`s on `larkgate_changes` (the triggers of migration 2 notify it with
//! `schema.table`), and each notification for this schema is told to every receiver of
//! [`crate::Store::watch_changes`].
//!
//! A notification sent while the connection was down is lost, so every (re)connection is told
//! as [`Change::Everything`]: a receiver then reads again whatever it follows. The connection is
//! tried again after 1 s, doubling to 30 s, for as long as a receiver is left.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls};

use super::PostgresStore;
use crate::Change;

/// The channel the triggers notify.
const CHANNEL: &str = "larkgate_changes";

/// Starts the listener; it ends once no receiver is left.
pub(super) fn listen(store: &PostgresStore) -> broadcast::Receiver<Change> {
    let (sender, receiver) = broadcast::channel(64);
    let config = store.config.clone();
    let schema = store.schema.clone();
    tokio::spawn(async move {
        let mut failing = Duration::from_secs(1);
        while sender.receiver_count() > 0 {
            match follow(&config, &schema, &sender).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(%error, "changes made through other larkgate processes are not followed until the database answers again");
                }
            }
            tokio::time::sleep(failing).await;
            failing = (failing * 2).min(Duration::from_secs(30));
        }
    });
    receiver
}

/// One connection's life: `LISTEN`, tell [`Change::Everything`], then each notification of
/// this schema. `Ok` once no receiver is left; `Err` when the connection breaks.
async fn follow(
    config: &tokio_postgres::Config,
    schema: &str,
    sender: &broadcast::Sender<Change>,
) -> Result<(), String> {
    let (client, mut connection) = config.connect(NoTls).await.map_err(|e| e.to_string())?;
    let (messages, mut received) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = stream.next().await {
            match message {
                Ok(message) => {
                    if messages.send(Ok(message)).is_err() {
                        return;
                    }
                }
                Err(error) => {
                    let _ = messages.send(Err(error));
                    return;
                }
            }
        }
    });
    let result = async {
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(|e| e.to_string())?;
        if sender.send(Change::Everything).is_err() {
            return Ok(());
        }
        let prefix = format!("{schema}.");
        loop {
            let message = tokio::select! {
                message = received.recv() => message,
                () = tokio::time::sleep(Duration::from_secs(5)) => {
                    if sender.receiver_count() == 0 {
                        return Ok(());
                    }
                    continue;
                }
            };
            match message {
                Some(Ok(AsyncMessage::Notification(notification))) => {
                    let change = notification
                        .payload()
                        .strip_prefix(&prefix)
                        .and_then(Change::of_table);
                    if let Some(change) = change
                        && sender.send(change).is_err()
                    {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error.to_string()),
                None => return Err("the connection was closed".to_owned()),
            }
        }
    }
    .await;
    driver.abort();
    result
}
