// Assistant text as Markdown: marked parses (GFM), highlight.js colours code blocks, and
// DOMPurify sanitizes the HTML before it reaches the page. Model output is untrusted:
// it may contain HTML, links and images written to look like the app's own.
import { Marked, type Tokens } from 'marked';
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import go from 'highlight.js/lib/languages/go';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

// The languages a chat about code mostly shows; the aliases (js, ts, sh, html, yml, ...)
// come with them. Others are shown plain rather than guessed, which is slow and often
// wrong on a half-streamed block.
for (const [name, lang] of Object.entries({
  bash, c, cpp, css, diff, go, java, javascript, json, markdown, python, rust, shell, sql, typescript, xml, yaml,
})) {
  hljs.registerLanguage(name, lang);
}

function escapeHTML(s: string): string {
  return s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    code({ text, lang }: Tokens.Code): string {
      const name = (lang ?? '').trim().split(/\s+/)[0].toLowerCase();
      if (name && hljs.getLanguage(name)) {
        const html = hljs.highlight(text, { language: name, ignoreIllegals: true }).value;
        return `<pre><code class="hljs language-${escapeHTML(name)}">${html}</code></pre>\n`;
      }
      return `<pre><code class="hljs">${escapeHTML(text)}</code></pre>\n`;
    },
  },
});

// Links open outside the app, and tell the target nothing.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node instanceof HTMLAnchorElement && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

const purifyConfig = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select'],
  FORBID_ATTR: ['style'],
};

/** renderMarkdown returns text as sanitized HTML nodes, ready to put in the page. */
export function renderMarkdown(text: string): DocumentFragment {
  const html = marked.parse(text, { async: false }) as string;
  return DOMPurify.sanitize(html, { ...purifyConfig, RETURN_DOM_FRAGMENT: true });
}
