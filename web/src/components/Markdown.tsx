// Messages as Markdown, safely: markdown-it with raw HTML off escapes any tag the model (or a
// hostile repository it read) writes, and its link validator drops `javascript:` and the like.

import MarkdownIt from "markdown-it";
import { memo } from "react";

const md = new MarkdownIt({ html: false, linkify: false, breaks: true });
const defaultLink = md.renderer.rules.link_open ?? ((tokens, idx, options, _env, self) => self.renderToken(tokens, idx, options));
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  tokens[idx].attrSet("target", "_blank");
  tokens[idx].attrSet("rel", "noopener noreferrer");
  return defaultLink(tokens, idx, options, env, self);
};

export const Markdown = memo(function Markdown({ text }: { text: string }) {
  return <div className="md" dangerouslySetInnerHTML={{ __html: md.render(text) }} />;
});
