// chatd's service worker: it keeps the app shell (the page, its script, style, manifest
// and icons) so the app opens without a network, and stays out of the way of everything
// else. It never caches or answers for the API: /v1/ (the WebSocket and the sessions
// API), /healthz, /readyz, /metrics; chatd's own state is always the server's.
//
// The build fills in VERSION (a hash of the shell's content) and SHELL, so every build
// that changes the shell is a new sw.js: the browser installs it, it caches the new shell
// under a new name and deletes the old one.
const VERSION = "2f8d1d93cc1c9b26";
const SHELL = ["/","/app.js","/app.css","/manifest.webmanifest","/icons/apple-touch-icon.png","/icons/icon-192.png","/icons/icon-512.png","/icons/icon.svg","/icons/maskable-512.png"];
const CACHE = 'chatd-shell-' + VERSION;
const PREFIX = 'chatd-shell-';

self.addEventListener('install', (event) => {
  event.waitUntil(
    (async () => {
      const cache = await caches.open(CACHE);
      // cache: 'reload' skips the HTTP cache, so the shell is the build this sw.js names.
      await cache.addAll(SHELL.map((url) => new Request(url, { cache: 'reload' })));
      await self.skipWaiting();
    })(),
  );
});

self.addEventListener('activate', (event) => {
  event.waitUntil(
    (async () => {
      for (const name of await caches.keys()) {
        if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
      }
      await self.clients.claim();
    })(),
  );
});

// isAppRoute matches web.go's: "/" and "/c/<session id>" are the app's pages.
function isAppRoute(path) {
  return path === '/' || /^\/c\/[^/]+$/.test(path);
}

function isServerOnly(path) {
  return (
    path.startsWith('/v1/') ||
    path === '/v1' ||
    path === '/healthz' ||
    path === '/readyz' ||
    path === '/metrics' ||
    path.startsWith('/debug/')
  );
}

async function fromCache(key, request) {
  const cache = await caches.open(CACHE);
  const hit = await cache.match(key);
  if (hit) return hit;
  return fetch(request);
}

self.addEventListener('fetch', (event) => {
  const request = event.request;
  if (request.method !== 'GET') return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin || isServerOnly(url.pathname)) return;
  if (request.mode === 'navigate') {
    if (isAppRoute(url.pathname)) event.respondWith(fromCache('/', request));
    return;
  }
  if (SHELL.includes(url.pathname)) event.respondWith(fromCache(url.pathname, request));
});
