// Messages as Markdown, safely: markdown-it with raw HTML off escapes any tag the model (or a
// hostile repository it read) writes, its link validator drops `javascript:` and the like, and
// links open in a new tab without a handle on this one.

import MarkdownIt from "markdown-it";
import { memo } from "react";

// No images: a picture the agent names would be fetched by the browser, a way to send data out
// of a sandbox that has no network (the page's CSP refuses them too).
const md = new MarkdownIt({ html: false, linkify: false, breaks: true }).disable("image");
const defaultLink = md.renderer.rules.link_open ?? ((tokens, idx, options, _env, self) => self.renderToken(tokens, idx, options));
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  tokens[idx].attrSet("target", "_blank");
  tokens[idx].attrSet("rel", "noopener noreferrer");
  return defaultLink(tokens, idx, options, env, self);
};

export const Markdown = memo(function Markdown({ text }: { text: string }) {
  return <div className="md" dangerouslySetInnerHTML={{ __html: md.render(text) }} />;
});
