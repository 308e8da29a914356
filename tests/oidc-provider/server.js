// Tandem's test OpenID Connect provider: a real, OpenID Certified `oidc-provider` (v9)
// with one confidential client, static test accounts and the built-in dev login page
// (any login name, any password; consent is auto-granted). Integration tests only.
// Env: OIDC_PORT, OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI, OIDC_KEY_FILE,
// OIDC_KID (the signing key's id; a restart with another one is a key rotation).
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import http from 'node:http';

import Provider from 'oidc-provider';

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`missing environment variable ${name}`);
    process.exit(2);
  }
  return value;
}

const port = Number(env('OIDC_PORT'));
const issuer = env('OIDC_ISSUER').replace(/\/$/, '');
const issuerUrl = new URL(issuer);
if (issuerUrl.pathname !== '/') {
  console.error('OIDC_ISSUER must be an origin without a path');
  process.exit(2);
}

// Fresh RS256 signing key; the private half goes to OIDC_KEY_FILE so tests can forge/verify tokens.
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
writeFileSync(env('OIDC_KEY_FILE'), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
const privateJwk = {
  ...privateKey.export({ format: 'jwk' }), kid: process.env.OIDC_KID || 'test-key-1', alg: 'RS256', use: 'sig',
};

const ACCOUNTS = {
  alice: { email: 'alice@acme.test', name: 'Alice Example', groups: ['engineering'] },
  bob: { email: 'bob@acme.test', name: 'Bob Example', groups: ['design'] },
  mallory: { email: 'mallory@evil.test', name: 'Mallory Example', groups: [] },
};

function account(id) {
  const known = ACCOUNTS[id] ?? { email: `${id}@acme.test`, name: id, groups: [] };
  return {
    accountId: id,
    async claims() {
      return {
        sub: id, email: known.email, email_verified: true, name: known.name, groups: known.groups,
      };
    },
  };
}

const clientId = env('OIDC_CLIENT_ID');

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: env('OIDC_CLIENT_SECRET'),
    redirect_uris: [env('OIDC_REDIRECT_URI')],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    // client_secret_post is accepted too: oidc-provider treats basic/post as interchangeable.
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks: { keys: [privateJwk] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'],
  },
  // Put scope-granted claims (email, name, groups) into the ID Token, not only userinfo.
  conformIdTokenClaims: false,
  pkce: { required: () => true }, // only S256 is supported by oidc-provider 9
  features: { devInteractions: { enabled: true } },
  findAccount: (ctx, id) => account(id),
  // Single first-party client: grant whatever it asks for, so there is no consent page.
  async loadExistingGrant(ctx) {
    const { oidc } = ctx;
    const grantId = oidc.result?.consent?.grantId || oidc.session.grantIdFor(oidc.client.clientId);
    const grant = (grantId && await oidc.provider.Grant.find(grantId)) || new oidc.provider.Grant({
      clientId: oidc.client.clientId, accountId: oidc.session.accountId,
    });
    grant.addOIDCScope([...oidc.requestParamOIDCScopes].join(' '));
    const claims = oidc.claims ?? {};
    grant.addOIDCClaims([...Object.keys(claims.id_token ?? {}), ...Object.keys(claims.userinfo ?? {})]);
    await grant.save();
    return grant;
  },
  ttl: {
    AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600,
  },
});
provider.proxy = true;

// Pin every request to the issuer's origin, whatever Host a fronting proxy (or none) sends,
// so generated URLs (discovery endpoints, resume redirects) always use OIDC_ISSUER.
const callback = provider.callback();
const server = http.createServer((req, res) => {
  req.headers.host = issuerUrl.host;
  req.headers['x-forwarded-proto'] = issuerUrl.protocol.slice(0, -1);
  delete req.headers['x-forwarded-host'];
  callback(req, res);
});
server.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider listening ${issuer}`);
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
