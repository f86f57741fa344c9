// Builds @chatd/ai-sdk: outdir/index.js and outdir/react.js (ES modules, bundled by
// esbuild, not minified) and outdir/*.d.ts (tsc, which type-checks src first: a type error fails the
// build). Deterministic: the same sources give the same bytes, with no absolute paths.
//
//   import { buildAISDK } from './ai-sdk/build.mjs'; await buildAISDK('ai-sdk/dist');
//   node ai-sdk/build.mjs [outdir]     (default ai-sdk/dist)
import { execFile } from 'node:child_process';
import { mkdir, readdir, rm } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as esbuild from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const tsc = join(here, '..', 'node_modules', '.bin', 'tsc');
const run = promisify(execFile);

export async function buildAISDK(outdir) {
  outdir = resolve(outdir);
  // Type-check and write the declarations. tsc is TypeScript 7 (native); it reports
  // errors on stdout.
  await rm(outdir, { recursive: true, force: true });
  await mkdir(outdir, { recursive: true });
  try {
    await run(tsc, ['-p', join(here, 'tsconfig.json'), '--outDir', outdir], { cwd: here });
  } catch (err) {
    throw new Error(`ai-sdk: tsc failed:\n${err.stdout || ''}${err.stderr || ''}`);
  }
  // Declarations only: drop anything else tsc may have left (it emits nothing else).
  for (const name of await readdir(outdir)) {
    if (!name.endsWith('.d.ts')) await rm(join(outdir, name), { recursive: true, force: true });
  }
  const common = {
    absWorkingDir: here,
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    minify: false,
    sourcemap: false,
    legalComments: 'inline',
    charset: 'utf8',
    logLevel: 'silent',
  };
  const builds = [
    // The transport and helpers: `ai` is a peer dependency (the app's own copy).
    { entryPoints: ['src/index.ts'], outfile: join(outdir, 'index.js'), external: ['ai'] },
    // @chatd/ai-sdk/react: imports index.js beside it at run time (one ChatdChatTransport
    // class, so instanceof holds), and the app's react and @ai-sdk/react.
    {
      entryPoints: ['src/react.ts'],
      outfile: join(outdir, 'react.js'),
      external: ['ai', 'react', '@ai-sdk/react'],
      plugins: [
        {
          name: 'index-beside',
          setup(b) {
            b.onResolve({ filter: /^\.\/index\.js$/ }, () => ({ path: './index.js', external: true }));
          },
        },
      ],
    },
  ];
  for (const { entryPoints, outfile, external, plugins = [] } of builds) {
    const result = await esbuild.build({
      ...common,
      entryPoints,
      outfile,
      external,
      plugins,
      banner: { js: '// @chatd/ai-sdk: built from web/ai-sdk/src by web/ai-sdk/build.mjs; do not edit.' },
    });
    if (result.errors.length) throw new Error(`ai-sdk: esbuild failed: ${JSON.stringify(result.errors)}`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildAISDK(process.argv[2] ?? join(here, 'dist'));
}
