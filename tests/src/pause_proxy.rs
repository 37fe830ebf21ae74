//! [`PausableProxy`]: a TCP forwarder to one target that can be frozen: while paused, no
//! byte moves in either direction (requests sent meanwhile are held, then delivered on
//! resume), as if the client process had been stopped with SIGSTOP between sending a
//! request and the server reading it.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub struct PausableProxy {
    pub addr: SocketAddr,
    paused: watch::Sender<bool>,
    token: CancellationToken,
}

async fn pump(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, mut paused: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // A chunk read while paused is held until resumed.
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl PausableProxy {
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (paused, _) = watch::channel(false);
        let token = CancellationToken::new();
        let (tx, tok) = (paused.clone(), token.clone());
        tokio::spawn(async move {
            loop {
                let inbound = tokio::select! {
                    _ = tok.cancelled() => return,
                    r = listener.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
                };
                let (rx_up, rx_down, conn_tok) = (tx.subscribe(), tx.subscribe(), tok.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(target).await else { return };
                    let (ir, iw) = inbound.into_split();
                    let (or, ow) = outbound.into_split();
                    tokio::select! {
                        _ = conn_tok.cancelled() => {}
                        _ = async { tokio::join!(pump(ir, ow, rx_up), pump(or, iw, rx_down)) } => {}
                    }
                });
            }
        });
        Ok(Self { addr, paused, token })
    }

    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}

impl Drop for PausableProxy {
    fn drop(&mut self) {
        self.token.cancel();
    }
}
