// What the executor runs in a page (with CDP's Runtime.evaluate) to read it: the interactive
// elements, indexed for the agent's clicks and typing, and the page as Markdown. Evaluated as
// the body of a function whose last statement calls one of these.
const INTERACTIVE = 'a[href],button,input:not([type=hidden]),select,textarea,summary,details,label[for],' +
  '[role=button],[role=link],[role=checkbox],[role=radio],[role=tab],[role=menuitem],[role=option],' +
  '[role=switch],[role=textbox],[role=combobox],[role=searchbox],[contenteditable=""],[contenteditable=true],' +
  '[onclick],[tabindex]:not([tabindex="-1"])';
const MAX_LISTED = 300;

function shown(el) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) return false;
  const s = getComputedStyle(el);
  return s.visibility !== 'hidden' && s.display !== 'none';
}

function clean(t, n) {
  t = (t || '').replace(/\s+/g, ' ').trim();
  return t.length > n ? t.slice(0, n) + '…' : t;
}

function quote(v) {
  return clean(String(v), 80).replace(/"/g, '&quot;');
}

function describe(el, i) {
  const tag = el.tagName.toLowerCase();
  const attrs = [];
  for (const a of ['type', 'name', 'role', 'href', 'placeholder', 'aria-label', 'title', 'alt']) {
    const v = el.getAttribute(a);
    if (v) attrs.push(`${a}="${quote(v)}"`);
  }
  if ((tag === 'input' || tag === 'textarea' || tag === 'select') && el.type !== 'password' && el.value) {
    attrs.push(`value="${quote(el.value)}"`);
  }
  if (el.checked) attrs.push('checked');
  if (el.disabled) attrs.push('disabled');
  const text = tag === 'select'
    ? Array.from(el.options).map(o => clean(o.text, 30)).slice(0, 20).join(' | ')
    : clean(el.innerText || el.textContent, 100);
  return `[${i}]<${tag}${attrs.length ? ' ' + attrs.join(' ') : ''}>${text}</${tag}>`;
}

// Numbers the interactive elements shown, in document order, and lists them.
function index() {
  document.querySelectorAll('[data-halyard-index]').forEach(e => e.removeAttribute('data-halyard-index'));
  const lines = [];
  let i = 0;
  for (const el of document.querySelectorAll(INTERACTIVE)) {
    if (!shown(el)) continue;
    // A label around an input it already lists says nothing more.
    if (el.tagName === 'LABEL' && el.control && el.contains(el.control)) continue;
    el.setAttribute('data-halyard-index', String(i));
    if (i < MAX_LISTED) lines.push(describe(el, i));
    i++;
  }
  const more = i > MAX_LISTED ? i - MAX_LISTED : 0;
  return {
    url: location.href,
    title: document.title,
    elements: lines,
    more,
    scroll_y: Math.round(scrollY),
    page_height: Math.round(document.documentElement.scrollHeight),
    viewport_height: innerHeight,
  };
}

// The element of index `i`, scrolled into view, and where to click it. The page is indexed
// first if it never was (the agent may act on a page it has not asked the state of).
function locate(i) {
  if (!document.querySelector('[data-halyard-index]')) index();
  const el = document.querySelector(`[data-halyard-index="${i}"]`);
  if (!el) return null;
  el.scrollIntoView({ block: 'center', inline: 'center' });
  const r = el.getBoundingClientRect();
  return {
    x: r.left + r.width / 2,
    y: r.top + r.height / 2,
    described: describe(el, i),
    href: el.tagName === 'A' ? el.href : null,
  };
}

// Focuses the field of index `i` and empties it, for the typing that follows.
function focusField(i) {
  const at = locate(i);
  if (!at) return null;
  const el = document.querySelector(`[data-halyard-index="${i}"]`);
  el.focus();
  if ('value' in el && el.tagName !== 'BUTTON' && el.tagName !== 'SELECT') {
    el.value = '';
    el.dispatchEvent(new Event('input', { bubbles: true }));
  } else if (el.isContentEditable) {
    document.execCommand('selectAll', false, null);
    document.execCommand('delete', false, null);
  } else {
    return { described: at.described, typable: false };
  }
  return { described: at.described, typable: true };
}

function scrollPage(down) {
  window.scrollBy(0, (down ? 1 : -1) * Math.round(innerHeight * 0.8));
  return { scroll_y: Math.round(scrollY), page_height: Math.round(document.documentElement.scrollHeight), viewport_height: innerHeight };
}

// The page as Markdown: headings, paragraphs, lists, tables, code and emphasis; links and
// images as Markdown links when `links` (else their text).
function markdown(links) {
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'SVG', 'CANVAS', 'IFRAME', 'HEAD', 'META', 'LINK']);
  const BLOCK = new Set(['P', 'DIV', 'SECTION', 'ARTICLE', 'MAIN', 'HEADER', 'FOOTER', 'NAV', 'ASIDE', 'FORM', 'FIELDSET',
    'UL', 'OL', 'DL', 'DT', 'DD', 'FIGURE', 'FIGCAPTION', 'BLOCKQUOTE', 'ADDRESS', 'TABLE', 'HR']);
  function inner(node) {
    let out = '';
    for (const c of node.childNodes) out += walk(c);
    return out;
  }
  function walk(node) {
    if (node.nodeType === Node.TEXT_NODE) return node.textContent.replace(/\s+/g, ' ');
    if (node.nodeType !== Node.ELEMENT_NODE) return '';
    const el = node;
    const tag = el.tagName.toUpperCase();
    if (SKIP.has(tag) || el.hidden || el.getAttribute('aria-hidden') === 'true') return '';
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') return '';
    switch (tag) {
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6':
        return `\n\n${'#'.repeat(Number(tag[1]))} ${clean(inner(el), 500)}\n\n`;
      case 'BR': return '\n';
      case 'HR': return '\n\n---\n\n';
      case 'A': {
        const text = clean(inner(el), 300);
        return links && el.href ? `[${text}](${el.href})` : text;
      }
      case 'IMG': {
        const alt = clean(el.alt, 200);
        return links && el.src ? `![${alt}](${el.src})` : alt;
      }
      case 'STRONG': case 'B': { const t = clean(inner(el), 1000); return t ? `**${t}**` : ''; }
      case 'EM': case 'I': { const t = clean(inner(el), 1000); return t ? `*${t}*` : ''; }
      case 'CODE': return el.closest('pre') ? el.textContent : '`' + el.textContent + '`';
      case 'PRE': return '\n\n```\n' + el.textContent.replace(/\n+$/, '') + '\n```\n\n';
      case 'LI': {
        const ordered = el.parentElement && el.parentElement.tagName === 'OL';
        return `\n${ordered ? '1.' : '-'} ${inner(el).trim()}`;
      }
      case 'TR': {
        const cells = Array.from(el.children).map(c => clean(inner(c), 200).replace(/\|/g, '\\|'));
        return `\n| ${cells.join(' | ')} |`;
      }
      case 'INPUT': case 'TEXTAREA': case 'SELECT': case 'BUTTON':
        return ' ' + clean(el.value || el.placeholder || el.innerText || '', 100) + ' ';
    }
    const text = inner(el);
    return BLOCK.has(tag) || style.display === 'block' ? `\n\n${text}\n\n` : text;
  }
  // Spaces that ended or began lines go, except in code blocks.
  let fenced = false;
  const lines = walk(document.body || document.documentElement).split('\n').map(l => {
    if (l.startsWith('```')) fenced = !fenced;
    return fenced ? l : l.trim();
  });
  const md = lines.join('\n').replace(/\n{3,}/g, '\n\n').trim();
  return { url: location.href, title: document.title, markdown: md };
}
