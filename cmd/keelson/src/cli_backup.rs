//! `keelson backup` and `keelson restore`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::cli_cluster::Target;

#[derive(Args)]
pub struct BackupArgs {
    #[command(flatten)]
    target: Target,
    /// The backup file to write (a snapshot of the store with its SHA-256).
    out: PathBuf,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// A file written by `keelson backup` or a server's scheduled backups.
    backup: PathBuf,
    /// The new, empty data directory of the new cluster's first server.
    #[arg(long)]
    data_dir: PathBuf,
    /// The old cluster's Secrets encryption key (`PKI_DIR/secrets.key`): Secrets are
    /// stored encrypted with it, so the new cluster needs it to read them.
    #[arg(long)]
    secrets_key: PathBuf,
    /// The new cluster's PKI directory (default DATA_DIR/pki); it gets the secrets key,
    /// and `keelson server --cluster-init` adds a new CA and keys beside it.
    #[arg(long)]
    pki_dir: Option<PathBuf>,
}

pub async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let client = args.target.client().await?;
    let server = client.endpoint().to_string();
    let started = std::time::Instant::now();
    let summary = keelson_replica::backup::save(&client, &args.out).await.with_context(|| format!("backing up through {server}"))?;
    println!(
        "saved {} ({} bytes of snapshot, sha256 {}) from {server} in {:.1}s",
        args.out.display(),
        summary.snapshot_bytes,
        summary.sha256,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let key = std::fs::read(&args.secrets_key).with_context(|| format!("reading the secrets key {}", args.secrets_key.display()))?;
    anyhow::ensure!(key.len() == 32, "{} is not a secrets key: it holds {} bytes, a key has 32", args.secrets_key.display(), key.len());
    let pki = args.pki_dir.clone().unwrap_or_else(|| args.data_dir.join("pki"));
    anyhow::ensure!(!pki.join("ca.crt").exists(), "{} already holds a cluster CA: a restore makes a new cluster, give it a new PKI directory", pki.display());
    let restored = keelson_replica::backup::restore(&args.backup, &args.data_dir)?;
    keelson_pki::ClusterMaterial::place_secrets_key(&pki, &key).with_context(|| format!("writing the secrets key into {}", pki.display()))?;
    println!(
        "restored {} (sha256 {}) into {} at revision {}; start the new cluster's first server with: keelson server --cluster-init --data-dir {}{}",
        args.backup.display(),
        restored.summary.sha256,
        args.data_dir.display(),
        restored.revision,
        args.data_dir.display(),
        args.pki_dir.as_ref().map(|p| format!(" --pki-dir {}", p.display())).unwrap_or_default()
    );
    Ok(())
}
