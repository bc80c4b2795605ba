// The reference: Hugging Face tokenizers in JavaScript (@lenml/tokenizers, a fork of
// transformers.js' tokenizers), run on the same inputs as `harvest tokenize`.
//
//   node tok_ref.js TOKENIZER_JSON FILE...       a JSON line {"input_ids": [...]} per file (its bytes
//                                                decoded as UTF-8 the WHATWG way), special tokens added
//   node tok_ref.js TOKENIZER_JSON --bench FILE  MB/s over the file's lines, one thread
"use strict";
const fs = require("fs");
const { TokenizerLoader } = require("@lenml/tokenizers");

const [tokPath, ...rest] = process.argv.slice(2);
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokPath, "utf8")),
  tokenizerConfig: { tokenizer_class: "PreTrainedTokenizer" }, // tokenizer.json alone
});
const encode = (text) => tok.encode(text, { add_special_tokens: true });

if (rest[0] === "--bench") {
  const lines = fs.readFileSync(rest[1], "utf8").split("\n").filter((l) => l.length);
  const bytes = lines.reduce((n, l) => n + Buffer.byteLength(l), 0);
  let best = Infinity;
  for (let r = 0; r < 3; r++) {
    tok.model.clear_cache?.();
    const t0 = process.hrtime.bigint();
    for (const l of lines) encode(l);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ bytes, seconds: best, mb_per_s: bytes / 1e6 / best }));
} else {
  const out = [];
  for (const f of rest) out.push(JSON.stringify({ input_ids: encode(fs.readFileSync(f, "utf8")) }));
  process.stdout.write(out.join("\n") + "\n");
}
