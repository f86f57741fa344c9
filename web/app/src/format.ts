// Formatting for people: context usage, times and sizes.
import { h, setAttr, setText } from './dom.ts';

/** The part of a run's usage (or a listed session's) the meter shows. */
export interface ContextUsage {
  contextTokens?: number;
  contextWindow?: number;
}

const numbers = new Intl.NumberFormat();
const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

/** contextShare is how full the context is (0..1), or null when unknown. */
export function contextShare(u: ContextUsage | null | undefined): number | null {
  if (!u || !u.contextWindow || u.contextTokens === undefined) return null;
  return Math.min(1, Math.max(0, u.contextTokens / u.contextWindow));
}

/**
 * meter fills el (a .meter) with a bar and, unless compact, a label for usage; el is
 * hidden when the usage is unknown.
 */
export function renderMeter(el: HTMLElement, u: ContextUsage | null | undefined, compact = false): void {
  const share = contextShare(u);
  el.hidden = share === null;
  if (share === null || !u) return;
  let fill = el.querySelector<HTMLElement>('.meter-fill');
  let label = el.querySelector<HTMLElement>('.meter-label');
  if (!fill) {
    fill = h('span', { class: 'meter-fill' });
    label = compact ? null : h('span', { class: 'meter-label' });
    el.replaceChildren(h('span', { class: 'meter-bar' }, fill), ...(label ? [label] : []));
    el.setAttribute('role', 'meter');
    el.setAttribute('aria-valuemin', '0');
    el.setAttribute('aria-valuemax', '100');
  }
  const pct = Math.round(share * 100);
  fill.style.width = `${Math.max(pct, share > 0 ? 2 : 0)}%`;
  const detail = `${numbers.format(u.contextTokens ?? 0)} of ${numbers.format(u.contextWindow ?? 0)} tokens of context used`;
  const shown = `${pct === 0 && share > 0 ? 'under 1' : pct}%`;
  if (label) setText(label, `${shown.replace('under 1', '<1')} context`);
  setAttr(el, 'aria-valuenow', String(pct));
  // What the label says, also for screen readers and in the compact (list) meter.
  setAttr(el, 'aria-label', `Context: ${shown} used`);
  setAttr(el, 'aria-valuetext', `${shown} of the context used`);
  setAttr(el, 'title', detail);
  setAttr(el, 'data-level', pct >= 90 ? 'full' : pct >= 70 ? 'high' : 'ok');
}

/** The part of a run's progress (or a listed session's) the app shows. */
export interface RunProgress {
  step: number;
  of: number;
  label?: string;
}

/** progressText says a run's progress for people: "pages: 3 of 7", or "3 of 7". */
export function progressText(p: RunProgress): string {
  const n = `${numbers.format(p.step)} of ${numbers.format(p.of)}`;
  return p.label ? `${p.label}: ${n}` : n;
}

/**
 * renderProgress makes a <progress> bar with its text for p; compact (the list) shows
 * "3/7" and keeps the whole text for its title.
 */
export function renderProgress(p: RunProgress, testid: string, compact = false): HTMLElement {
  const text = progressText(p);
  const bar = h('progress', { class: 'progress-bar', max: p.of, value: p.step, 'aria-label': text });
  const shown = compact ? `${numbers.format(p.step)}/${numbers.format(p.of)}` : text;
  return h('span', { class: 'progress', 'data-testid': testid, title: text }, bar, h('span', { class: 'progress-label' }, shown));
}

/** ago says how long ago an RFC 3339 time was ("5 minutes ago"). */
export function ago(time: string, now = Date.now()): string {
  const t = Date.parse(time);
  if (Number.isNaN(t)) return '';
  const s = Math.round((t - now) / 1000);
  const steps: [Intl.RelativeTimeFormatUnit, number][] = [
    ['second', 60],
    ['minute', 60],
    ['hour', 24],
    ['day', 7],
    ['week', 4.35],
    ['month', 12],
    ['year', Infinity],
  ];
  let v = s;
  for (const [unit, size] of steps) {
    if (Math.abs(v) < size || unit === 'year') {
      return unit === 'second' && Math.abs(v) < 45 ? relative.format(0, 'second') : relative.format(Math.round(v), unit);
    }
    v /= size;
  }
  return '';
}

const sizeUnits = ['KB', 'MB', 'GB', 'TB'];
const oneDecimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

/** bytes says a file's size for people: "512 B", "2.3 KB", "14 MB" (1 KB = 1024 B). */
export function bytes(n: number): string {
  if (!(n >= 1024)) return `${numbers.format(Math.max(0, n || 0))} B`;
  let v = n;
  let unit = '';
  for (const u of sizeUnits) {
    v /= 1024;
    unit = u;
    if (v < 1024) break;
  }
  return `${v < 10 ? oneDecimal.format(v) : numbers.format(Math.round(v))} ${unit}`;
}

const clockTime = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });

/** The parts of a tool call's decision (and of a rule) that describeDecision reads. */
export interface DecisionLike {
  approved: boolean;
  by?: string;
  at: string;
  via?: string;
}

/**
 * describeDecision says how a tool call was decided, e.g. "approved by you, 14:02",
 * "approved by the rule for ls, 14:05", "denied: nobody decided in time, 14:10". by is
 * "you" when it is me (the signed-in user's id) or, without sign-in, empty.
 */
export function describeDecision(d: DecisionLike, me = '', rule = ''): string {
  const t = Date.parse(d.at);
  const when = Number.isNaN(t) ? '' : `, ${clockTime.format(t)}`;
  if (d.via === 'expiry') return `denied: nobody decided in time${when}`;
  const verb = d.approved ? 'approved' : 'denied';
  if (d.via === 'rule') return `${verb} by the rule for ${rule || 'this tool'} (allowed for this conversation)${when}`;
  const who = !d.by || d.by === me ? 'you' : d.by;
  return `${verb} by ${who}${when}`;
}
