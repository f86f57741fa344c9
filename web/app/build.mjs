// Builds the chat PWA into outdir (web/dist, which package web embeds):
//
//   index.html, manifest.webmanifest, icons/   copied from here
//   app.js    src/main.ts bundled with the client library (../client/src) and the
//             Markdown stack, minified
//   app.css   app.css, minified
//   sw.js     sw.js with the shell's file list and a version hashed from their content
//
// The output depends on the sources alone (no dates, no absolute paths), so `node
// build.mjs --check` can rebuild it elsewhere and compare byte for byte.
import { createHash } from 'node:crypto';
import { cp, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const web = join(here, '..');

/**
 * Builds the app into outdir, replacing what is there. clientDist (the built client
 * library) is not used: the app bundles the client from its TypeScript sources, so
 * the two always build from the same commit.
 */
export async function buildApp(outdir, clientDist) { // eslint-disable-line no-unused-vars
  await rm(outdir, { recursive: true, force: true });
  await mkdir(join(outdir, 'icons'), { recursive: true });

  const common = {
    absWorkingDir: web, // paths esbuild may print are relative to web/, wherever outdir is
    bundle: true,
    minify: true,
    charset: 'utf8',
    legalComments: 'eof', // the licences of marked, DOMPurify and highlight.js ship with them
    logLevel: 'warning',
    write: false,
  };
  const [js, css] = await Promise.all([
    esbuild.build({
      ...common,
      entryPoints: [join(here, 'src', 'main.ts')],
      outfile: join(outdir, 'app.js'),
      format: 'esm',
      target: ['es2022', 'chrome111', 'firefox111', 'safari16.4'],
    }),
    esbuild.build({
      ...common,
      entryPoints: [join(here, 'app.css')],
      outfile: join(outdir, 'app.css'),
      target: ['chrome111', 'firefox111', 'safari16.4'],
    }),
  ]);
  for (const f of [...js.outputFiles, ...css.outputFiles]) await writeFile(f.path, f.contents);

  await cp(join(here, 'index.html'), join(outdir, 'index.html'));
  await cp(join(here, 'manifest.webmanifest'), join(outdir, 'manifest.webmanifest'));
  const icons = (await readdir(join(here, 'icons'))).filter((n) => /\.(png|svg)$/.test(n)).sort();
  for (const name of icons) await cp(join(here, 'icons', name), join(outdir, 'icons', name));

  // The shell the service worker caches; "/" is index.html.
  const shell = ['/', '/app.js', '/app.css', '/manifest.webmanifest', ...icons.map((n) => '/icons/' + n)];
  const hash = createHash('sha256');
  for (const url of shell) {
    const file = url === '/' ? 'index.html' : url.slice(1);
    hash.update(url + '\0');
    hash.update(await readFile(join(outdir, file)));
    hash.update('\0');
  }
  const version = hash.digest('hex').slice(0, 16);
  const sw = (await readFile(join(here, 'sw.js'), 'utf8'))
    .replace("'__VERSION__'", JSON.stringify(version))
    .replace('__SHELL__', JSON.stringify(shell));
  await writeFile(join(outdir, 'sw.js'), sw);
}
