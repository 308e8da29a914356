//! Commands run next to the server's data dir, without a running server: they open the database
//! directly (safe beside a running server: SQLite in WAL mode, or PostgreSQL).

use anyhow::Result;
use tandem_server::config::Config;
use tandem_server::db::Db;
use tandem_server::identity::auth;

async fn open(config: &Config) -> Result<Db> {
    let db = Db::connect(&config.database_url).await?;
    db.migrate().await?;
    Ok(db)
}

/// `tandem login-link`.
pub async fn login_link(config: &Config) -> Result<()> {
    let db = open(config).await?;
    let admin = auth::local_admin(&db).await?;
    let code = auth::create_login_code(&db, admin.id).await?;
    let public = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.listen));
    println!("{}", auth::login_url(&public, &code));
    Ok(())
}

/// `tandem token create` without TANDEM_TOKEN.
pub async fn token_create(
    config: &Config,
    name: &str,
    expires_in: Option<i64>,
    json: bool,
) -> Result<()> {
    let db = open(config).await?;
    let admin = auth::local_admin(&db).await?;
    let created = auth::create_api_token(&db, &admin, name, expires_in).await?;
    super::output::token(&created, json)
}
