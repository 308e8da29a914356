// Self-check for server.js over plain HTTP (no browser): `node check.js`.
// Runs the code flow (PKCE S256 + nonce + state) directly, then again through a
// forwarding proxy that rewrites Host (issuer = proxy URL), and verifies the id_token.
import { spawn } from 'node:child_process';
import {
  createHash, createPublicKey, randomBytes, verify,
} from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const CLIENT_ID = 'tandem-test';
const CLIENT_SECRET = 'test-secret';
const REDIRECT_URI = 'http://127.0.0.1:9/callback';
const b64u = (buf) => Buffer.from(buf).toString('base64url');

function freePort() {
  return new Promise((resolve) => {
    const s = http.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function startProvider(port, issuer, keyFile) {
  const child = spawn(process.execPath, [new URL('server.js', import.meta.url).pathname], {
    env: {
      ...process.env,
      OIDC_PORT: String(port),
      OIDC_ISSUER: issuer,
      OIDC_CLIENT_ID: CLIENT_ID,
      OIDC_CLIENT_SECRET: CLIENT_SECRET,
      OIDC_REDIRECT_URI: REDIRECT_URI,
      OIDC_KEY_FILE: keyFile,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) {
        assert.equal(out.trim(), `oidc-provider listening ${issuer}`);
        resolve();
      }
    });
    child.on('exit', (code) => reject(new Error(`server.js exited ${code}`)));
  });
  return child;
}

// Forwards every path unchanged to the provider, with Host rewritten to the backend.
function startProxy(port, backendPort) {
  const server = http.createServer((req, res) => {
    const up = http.request({
      host: '127.0.0.1', port: backendPort, method: req.method, path: req.url,
      headers: { ...req.headers, host: `127.0.0.1:${backendPort}` },
    }, (ur) => { res.writeHead(ur.statusCode, ur.headers); ur.pipe(res); });
    req.pipe(up);
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}

// Minimal cookie jar: name -> value (one host, paths ignored; fine for this flow).
class Jar {
  cookies = new Map();

  store(res) {
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const i = pair.indexOf('=');
      this.cookies.set(pair.slice(0, i), pair.slice(i + 1));
    }
  }

  header() { return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; '); }
}

async function step(jar, log, method, url, body) {
  const res = await fetch(url, {
    method,
    redirect: 'manual',
    headers: {
      cookie: jar.header(),
      ...(body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
    },
    body: body ? new URLSearchParams(body) : undefined,
  });
  jar.store(res);
  const location = res.headers.get('location');
  log.push(`${method} ${new URL(url).pathname} -> ${res.status}${location ? ` Location: ${location}` : ''}`
    + `${res.headers.getSetCookie().length ? ` Set-Cookie: ${res.headers.getSetCookie().map((c) => c.split('=')[0]).join(',')}` : ''}`);
  return { res, location, text: await res.text() };
}

async function flow(issuer, keyFile, { login, authMethod, prompt }) {
  const log = [];
  const jar = new Jar();
  const disco = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json();
  assert.equal(disco.issuer, issuer);
  assert.ok(disco.authorization_endpoint.startsWith(issuer), disco.authorization_endpoint);
  assert.ok(disco.token_endpoint.startsWith(issuer), disco.token_endpoint);

  const verifier = b64u(randomBytes(32));
  const challenge = b64u(createHash('sha256').update(verifier).digest());
  const state = b64u(randomBytes(12));
  const nonce = b64u(randomBytes(12));
  const auth = new URL(disco.authorization_endpoint);
  auth.search = new URLSearchParams({
    response_type: 'code', client_id: CLIENT_ID, redirect_uri: REDIRECT_URI,
    scope: 'openid email profile groups', state, nonce,
    code_challenge: challenge, code_challenge_method: 'S256',
    ...(prompt ? { prompt } : {}),
  }).toString();

  // 1. GET /auth?... -> 303 Location: /interaction/<uid>
  let r = await step(jar, log, 'GET', auth.href);
  assert.equal(r.res.status, 303);
  const interaction = new URL(r.location, issuer).href;
  // 2. GET /interaction/<uid> -> 200 HTML login form
  r = await step(jar, log, 'GET', interaction);
  assert.equal(r.res.status, 200);
  const action = /<form[^>]*action="([^"]+)"/.exec(r.text)[1];
  assert.ok(/name="prompt" value="login"/.test(r.text) && /name="login"/.test(r.text) && /name="password"/.test(r.text));
  // 3. POST /interaction/<uid> prompt=login&login=..&password=.. -> 303 Location: <issuer>/auth/<uid>
  r = await step(jar, log, 'POST', new URL(action, issuer).href, { prompt: 'login', login, password: 'anything' });
  assert.equal(r.res.status, 303);
  // 4. GET /auth/<uid> (resume) -> 303 Location: redirect_uri?code=..&state=..&iss=..
  r = await step(jar, log, 'GET', new URL(r.location, issuer).href);
  assert.equal(r.res.status, 303);
  const cb = new URL(r.location);
  assert.equal(`${cb.origin}${cb.pathname}`, REDIRECT_URI);
  assert.equal(cb.searchParams.get('state'), state);
  const code = cb.searchParams.get('code');
  assert.ok(code);

  // 5. POST /token
  const form = {
    grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier,
  };
  const headers = { 'content-type': 'application/x-www-form-urlencoded' };
  if (authMethod === 'client_secret_basic') {
    headers.authorization = `Basic ${Buffer.from(`${encodeURIComponent(CLIENT_ID)}:${encodeURIComponent(CLIENT_SECRET)}`).toString('base64')}`;
  } else {
    Object.assign(form, { client_id: CLIENT_ID, client_secret: CLIENT_SECRET });
  }
  const tr = await fetch(disco.token_endpoint, { method: 'POST', headers, body: new URLSearchParams(form) });
  const tokens = await tr.json();
  log.push(`POST /token (${authMethod}) -> ${tr.status} keys: ${Object.keys(tokens).join(',')}`);
  assert.equal(tr.status, 200, JSON.stringify(tokens));

  const [h, p, s] = tokens.id_token.split('.');
  const header = JSON.parse(Buffer.from(h, 'base64url'));
  const claims = JSON.parse(Buffer.from(p, 'base64url'));
  assert.equal(header.kid, 'test-key-1');
  assert.equal(header.alg, 'RS256');
  assert.equal(claims.iss, issuer);
  assert.equal(claims.aud, CLIENT_ID);
  assert.equal(claims.nonce, nonce);
  assert.equal(claims.sub, login);
  assert.ok(claims.exp > Date.now() / 1000);
  assert.ok(claims.email && claims.name && Array.isArray(claims.groups));
  const key = createPublicKey(readFileSync(keyFile));
  assert.ok(verify('sha256', Buffer.from(`${h}.${p}`), key, Buffer.from(s, 'base64url')), 'signature');
  return { log, header, claims, disco };
}

const keyFile = join(tmpdir(), `oidc-check-${process.pid}.pem`);
const children = [];
let proxy;
let failed = 0;
let passed = 0;
async function run(name, fn) {
  try { await fn(); passed += 1; console.log(`ok - ${name}`); } catch (e) { failed += 1; console.log(`not ok - ${name}\n${e.stack}`); }
}
try {
  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}`;
  children.push(await startProvider(port, issuer, keyFile));
  await run('direct flow, alice, client_secret_basic', async () => {
    const { log, header, claims, disco } = await flow(issuer, keyFile, { login: 'alice', authMethod: 'client_secret_basic' });
    console.log(log.join('\n'));
    console.log('id_token header', JSON.stringify(header));
    console.log('id_token claims', JSON.stringify(claims));
    const { issuer: iss, authorization_endpoint, token_endpoint, userinfo_endpoint, jwks_uri, end_session_endpoint } = disco;
    console.log('discovery', JSON.stringify({ iss, authorization_endpoint, token_endpoint, userinfo_endpoint, jwks_uri, end_session_endpoint }));
    assert.deepEqual(claims.groups, ['engineering']);
    assert.equal(claims.email, 'alice@acme.test');
    assert.equal(claims.email_verified, true);
  });
  await run('PKCE is required', async () => {
    const u = new URL(`${issuer}/auth`);
    u.search = new URLSearchParams({
      response_type: 'code', client_id: CLIENT_ID, redirect_uri: REDIRECT_URI, scope: 'openid', state: 'x', nonce: 'n',
    }).toString();
    const res = await fetch(u, { redirect: 'manual' });
    assert.equal(res.status, 303);
    assert.match(res.headers.get('location'), /error=invalid_request/);
    console.log(`GET /auth without code_challenge -> ${res.status} Location: ${res.headers.get('location')}`);
  });

  const backend = await freePort();
  const front = await freePort();
  const proxIssuer = `http://localhost:${front}`;
  children.push(await startProvider(backend, proxIssuer, keyFile));
  proxy = await startProxy(front, backend);
  await run('via Host-rewriting proxy, mallory, client_secret_post, prompt=login', async () => {
    const { log, claims } = await flow(proxIssuer, keyFile, { login: 'mallory', authMethod: 'client_secret_post', prompt: 'login' });
    console.log(log.join('\n'));
    assert.equal(claims.email, 'mallory@evil.test');
    assert.deepEqual(claims.groups, []);
  });
  await run('unknown login name', async () => {
    const { claims } = await flow(proxIssuer, keyFile, { login: 'zed', authMethod: 'client_secret_basic' });
    assert.equal(claims.email, 'zed@acme.test');
  });
} finally {
  proxy?.close();
  for (const c of children) c.kill('SIGTERM');
}
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
