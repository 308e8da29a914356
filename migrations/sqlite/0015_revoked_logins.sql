-- Browser logins ended by logout before their expiry (a copied JWT stops working at once).
CREATE TABLE revoked_logins (
    jti TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
