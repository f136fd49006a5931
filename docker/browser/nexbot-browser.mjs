#!/usr/bin/env node
// nexbot-browser: the browser image's MCP server (docker/browser.Dockerfile). Starts Microsoft's
// Playwright MCP server (npm `@playwright/mcp`) in this process, speaking MCP over stdin/stdout,
// with this image's Chromium and Nexbot's settings:
//
//   nexbot-browser [--room PATH] [PLAYWRIGHT-MCP-ARGS...]
//
// - the room (default /room, the chat's room the host mounts) is the working directory and so
//   Playwright MCP's workspace root; the profile is kept in <room>/.browser/profile (a login
//   survives a restart); what it writes (downloads, screenshots, the pages' console logs) in
//   <room>/downloads. Both are made when missing. An action's answer carries no snapshot and
//   no Playwright code (the model asks for the page with browser_snapshot).
// - the egress proxy is the browser's only way out: HTTPS_PROXY or HTTP_PROXY (either case)
//   becomes Chromium's proxy server with no bypass list, so every request of the browser goes
//   through it, to loopback and private addresses too (Playwright adds `<-loopback>` to undo
//   Chromium's implicit loopback bypass). Without one it refuses to start. Options and
//   environment that would undo that (another proxy or a bypass list, a TCP transport, a
//   browser elsewhere) are refused.
// - headless Chromium at /opt/chromium/chromium without its sandbox (the container is the
//   sandbox: no capabilities, no new privileges), driven over --remote-debugging-pipe (what
//   Playwright always passes when it launches Chromium: no DevTools port), with the flags below
//   that stop it calling home, passed in a config file (browser.launchOptions.args; a --config
//   of the caller's, JSON, is merged with them).
// - the client's roots are not asked for (--ignore-roots): the workspace is the room whatever
//   the client declares.
// Any further arguments go to Playwright MCP after these defaults, so the caller's win.
// `nexbot-browser --version` prints the versions of the three parts.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const CHROMIUM = '/opt/chromium/chromium';
const require = createRequire(import.meta.url);
const mcpDir = path.dirname(require.resolve('@playwright/mcp/package.json'));
const cli = path.join(mcpDir, 'cli.js');

// Chromium switches beyond Playwright's own (which already has --disable-background-networking,
// --disable-component-update, --disable-sync, --metrics-recording-only,
// --no-default-browser-check, --disable-breakpad, --no-first-run, ...). Behind a logging proxy,
// Chromium 156 with Playwright's switches alone still asked, by itself, for
// accounts.google.com/ListAccounts (at start and again after each page),
// update.googleapis.com (an on-demand component, the optimization guide's on-device model
// manifest, which --disable-component-update does not stop) and content-autofill.googleapis.com
// (field predictions, on any page with a form). Those services get a URL on port 9, which
// Chromium refuses to connect to (ERR_UNSAFE_PORT) before it reaches for the proxy: nothing
// leaves. Signing in to Google in a page still works; Chromium just no longer treats
// accounts.google.com as its own account service. (What switches do not cover, the image's
// managed policy does: /etc/chromium/policies/managed/nexbot.json, see the Makefile.)
const CHROMIUM_ARGS = [
  '--gaia-url=http://0.0.0.0:9',
  '--component-updater=url-source=http://0.0.0.0:9/',
  '--autofill-server-url=http://0.0.0.0:9/',
  '--disable-domain-reliability',
  '--disable-client-side-phishing-detection',
];

function die(message) {
  process.stderr.write(`nexbot-browser: ${message}\n`);
  process.exit(2);
}

const args = process.argv.slice(2);
let room = '/room';
let callerConfig;
const rest = [];
for (let i = 0; i < args.length; i++) {
  const arg = args[i];
  const [name, inline] = arg.startsWith('--') && arg.includes('=')
    ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
  const value = () => {
    const v = inline ?? args[++i];
    if (v === undefined || v === '') die(`${name} needs a value`);
    return v;
  };
  if (name === '--room') room = value();
  else if (name === '--config') callerConfig = path.resolve(value());
  else rest.push(arg);
}

if (rest.includes('--version') || rest.includes('-V')) {
  const mcp = require(path.join(mcpDir, 'package.json')).version;
  let chromium;
  try {
    chromium = execFileSync(CHROMIUM, ['--version'], { encoding: 'utf8' }).trim();
  } catch (e) {
    chromium = `not runnable (${e.message.split('\n')[0]})`;
  }
  process.stdout.write(`nexbot-browser: Playwright MCP ${mcp}, Node ${process.version}, ${chromium}\n`);
  process.exit(0);
}
const help = rest.includes('--help') || rest.includes('-h');

// What would take the browser around the proxy or off stdio.
const REFUSED = ['--proxy-server', '--proxy-bypass', '--port', '--host', '--cdp-endpoint',
  '--endpoint', '--extension'];
for (const arg of rest) {
  const name = arg.split('=')[0];
  if (REFUSED.includes(name))
    die(`${name} is not allowed: the browser runs on stdio, behind the egress proxy, here`);
}
for (const name of ['PLAYWRIGHT_MCP_PROXY_SERVER', 'PLAYWRIGHT_MCP_PROXY_BYPASS', 'PLAYWRIGHT_MCP_PORT',
  'PLAYWRIGHT_MCP_HOST', 'PLAYWRIGHT_MCP_CDP_ENDPOINT', 'PLAYWRIGHT_MCP_EXTENSION',
  'PLAYWRIGHT_MCP_CONFIG', 'PLAYWRIGHT_DISABLE_FORCED_CHROMIUM_PROXIED_LOOPBACK'])
  delete process.env[name];

const proxy = ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy']
  .map((name) => process.env[name]?.trim()).find(Boolean);
if (!proxy && !help)
  die('no HTTP_PROXY: the browser only runs behind the egress proxy');
if (proxy) {
  let url;
  try {
    url = new URL(proxy.includes('://') ? proxy : `http://${proxy}`);
  } catch {
    die(`the proxy ${JSON.stringify(proxy)} is not a URL`);
  }
  if (!['http:', 'https:', 'socks5:'].includes(url.protocol))
    die(`the proxy ${JSON.stringify(proxy)} is not http://, https:// or socks5://`);
}

// Playwright's config: Chromium's extra switches, merged into the caller's config if any (its
// relative paths made absolute first: Playwright resolves them against the file's folder, and
// the merged file is in TMPDIR).
let config = {};
if (callerConfig) {
  try {
    config = JSON.parse(fs.readFileSync(callerConfig, 'utf8'));
  } catch (e) {
    die(`--config ${callerConfig}: ${e.message} (a JSON file is expected)`);
  }
  const base = path.dirname(callerConfig);
  const absolute = (object, ...keys) => {
    for (const key of keys) {
      if (typeof object?.[key] === 'string') object[key] = path.resolve(base, object[key]);
    }
  };
  const b = config.browser;
  absolute(config, 'outputDir');
  absolute(b, 'userDataDir');
  absolute(b?.launchOptions, 'executablePath', 'tracesDir', 'downloadsPath', 'artifactsDir');
  absolute(b?.contextOptions, 'storageState');
  absolute(b?.contextOptions?.recordHar, 'path');
  absolute(b?.contextOptions?.recordVideo, 'dir');
  for (const certificate of b?.contextOptions?.clientCertificates ?? [])
    absolute(certificate, 'certPath', 'keyPath', 'pfxPath');
  for (const key of ['initPage', 'initScript']) {
    if (Array.isArray(b?.[key])) b[key] = b[key].map((p) => path.resolve(base, p));
  }
  // The proxy is this launcher's alone.
  delete b?.launchOptions?.proxy;
  delete b?.contextOptions?.proxy;
  if (b?.cdpEndpoint || b?.remoteEndpoint || config.extension || config.server?.port || config.server?.host)
    die(`--config ${callerConfig}: a browser elsewhere or a TCP transport is not allowed here`);
}
config.browser ??= {};
config.browser.launchOptions ??= {};
config.browser.launchOptions.args = [
  ...(config.browser.launchOptions.args ?? []).filter((a) => !/^--(no-)?proxy|^--remote-debugging-(port|address)/.test(a)),
  ...CHROMIUM_ARGS,
];
let configFile;
try {
  configFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nexbot-browser-')), 'config.json');
  fs.writeFileSync(configFile, JSON.stringify(config, null, 2));
} catch (e) {
  die(`its config in ${os.tmpdir()}: ${e.message} (TMPDIR must be writable)`);
}

room = path.resolve(room);
const state = path.join(room, '.browser');
if (!help) {
  try {
    fs.mkdirSync(path.join(state, 'profile'), { recursive: true });
    fs.mkdirSync(path.join(room, 'downloads'), { recursive: true });
    // Chromium's lock of the profile names the container it ran in (hostname-pid): a container
    // that was killed leaves it, and the next one (another hostname) would be refused the
    // profile as "in use on another computer". The host runs one browser per chat and room, so
    // a lock found here is always a dead one.
    for (const lock of ['SingletonLock', 'SingletonSocket', 'SingletonCookie'])
      fs.rmSync(path.join(state, 'profile', lock), { force: true });
    process.chdir(room);
  } catch (e) {
    die(`the room ${room}: ${e.message}`);
  }
}

const defaults = [
  '--headless', '--no-sandbox', '--browser', 'chromium', '--executable-path', CHROMIUM,
  '--output-dir', path.join(room, 'downloads'), '--ignore-roots', '--config', configFile,
  // An action answers with the page's address and title; the model asks for the page itself
  // (browser_snapshot), which comes back in the answer: with "full" every action would write a
  // snapshot file into the room that the model cannot see.
  '--snapshot-mode', 'none',
  // No Playwright code in the answers: the model needs none, and it would repeat what was
  // typed.
  '--codegen', 'none',
];
// --isolated keeps the profile in memory; Playwright refuses it together with a profile folder.
if (!rest.includes('--isolated')) defaults.push('--user-data-dir', path.join(state, 'profile'));
if (proxy) defaults.push('--proxy-server', proxy);

process.argv = [process.argv[0], cli, ...defaults, ...rest];
require(cli);
