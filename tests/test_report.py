"""`harvest report OUT.h5 -o REPORT.html` (docs/report.md), rendered in a real browser.

Three outputs: the spec model (encdec, with its tokenizer), a Llama-style preset (Llama-3.2-1B)
and an MoE preset (Qwen3-MoE: expert_indices, router_logits), each with /stats, select and
attention probabilities stored, and a /norm_profile. Each page:
- is self-contained: no http(s) URL, no src= or href= to another file, no <script>, no <link>;
- loads in headless Chromium (Debian's `chromium`) with no console message at all (any CONSOLE
  line on stderr under --enable-logging=stderr; a page that logs is shown to be caught), with every
  host name resolving nowhere (--host-resolver-rules), so a request would fail loudly too;
- has every expected plot in the DOM after load (--dump-dom): a <figure class="plot"> with an
  <svg> that draws something (paths with points, or rects), and a screenshot (--screenshot) that is
  a PNG of the window's size with more than a few colours;
- shows the numbers of an independent numpy computation over the output: the mean norm per layer
  and per position (from the activations themselves), the percentiles (interpolated in the
  profile's histogram as docs/report.md defines, and the median within the bin of the true one),
  the outlier table (prompt, position, token id; the token's text on the spec model), the feature
  mean histograms (from /stats), the head-mean attention pattern of each chosen prompt
  (--prompts 0,2 on the spec model; prompts of 70 and 299 tokens as block means, and their norms
  by position in blocks of 2 positions), the expert load
  counts (np.bincount of expert_indices) and
  the router entropy (softmax of router_logits in float64), the selection counts;
- leaves out, with a note naming the job key, what the output lacks (no /norm_profile, no
  expert_indices on a dense model).
The token layout's expert load is checked too (an MoE output with token rows).
Adversarial: a renamed copy, a copy with a segment missing (refused as inspect refuses them) and
an incomplete output (complete 0: refused as stats refuses it), a malformed /norm_profile group,
-o equal to the input, to a file of its parts folder or to the tokenizer.json it reads, -o a
folder, a missing output, an -o in a folder that does not exist or under a regular file, --prompts beyond the output or not a number: exit 1 naming
the file or the flag, nothing written (no REPORT.html, no REPORT.html.tmp), the output unchanged.

The /norm_profile groups come from the job key "norm_profile" (harvest/normprofile.c); the page's
numbers are checked against numpy over the stored activations."""
import hashlib
import html.parser
import os
import shutil
import struct
import subprocess
import sys
import zlib

import h5py
import numpy as np

from util import args, check, finish, run, write_job, write_prompts

harvest, work = args()
CHROMIUM = shutil.which("chromium")
if not CHROMIUM:
    sys.exit("FAIL: chromium is not installed (setup.sh test installs it)")
HERE = os.path.dirname(os.path.abspath(__file__))
QS = [0.05, 0.25, 0.5, 0.75, 0.95]


# ---- the norm profile's numpy side (docs/output.md "The norm profile") ----------------------------
def edges():
    return np.array([2.0 ** ((i - 32) / 4) for i in range(129)])  # bins 1..128: [e[i-1], e[i])


def norm_rows(f, name):
    """(norms, prompt, position, token) of every token row of /activations/name (prompt layout)
    that the selection kept (/tokens/selected; the norm profile takes those only), float64."""
    x = f["activations/" + name]
    lengths = f["prompts/length"][()]
    off = f["prompts/token_offset"][()]
    ids = f["tokens/input_ids"][()]
    sel = f["tokens/selected"][()].astype(bool) if "tokens/selected" in f else \
        np.ones(len(ids), bool)
    out = []
    for p, T in enumerate(lengths):
        a = x[p, :T].astype(np.float64).reshape(T, -1)
        k = sel[off[p]:off[p] + T]
        out += [(np.sqrt((a * a).sum(1))[k], np.full(T, p)[k], np.arange(T)[k],
                 ids[off[p]:off[p] + T][k])]
    return [np.concatenate(c) for c in zip(*out)]




def hist_quantile(h, e, q):
    """docs/report.md: the bin where the cumulative count reaches q * total, linear inside it."""
    total, target, cum = h.sum(), q * h.sum(), 0
    for i in range(130):
        if h[i] == 0:
            continue
        if cum + h[i] >= target or i == 129:
            if i == 129:
                return e[128]
            lo, hi = (0.0 if i == 0 else e[i - 1]), e[i]
            return lo + max((target - cum) / h[i], 0) * (hi - lo)
        cum += h[i]
    return float("nan") if total == 0 else None


# ---- the page: parsed from Chromium's DOM after load ---------------------------------------------
class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.figs, self.fig, self.notes, self.tables, self.cell, self.row = {}, None, [], {}, None, None
        self.table = None

    def handle_starttag(self, tag, a):
        a = dict(a)
        if tag == "figure" and "plot" in (a.get("class") or ""):
            self.fig = self.figs[a["id"]] = {"kind": a.get("data-kind"), "svg": 0, "paths": [],
                                             "rects": 0, "groups": [], "bands": []}
        elif self.fig is not None:
            if tag == "svg":
                self.fig["svg"] += 1
            elif tag == "path" and "series" in (a.get("class") or ""):
                self.fig["paths"].append(a)
            elif tag == "path" and "band" in (a.get("class") or ""):
                self.fig["bands"].append(a)
            elif tag == "rect":
                self.fig["rects"] += 1
            elif tag == "g":
                self.fig["groups"].append(a)
        if tag == "li" and a.get("data-missing"):
            self.notes.append(a["data-missing"])
        if tag == "table" and a.get("id"):
            self.table = self.tables[a["id"]] = []
        if tag == "tr" and self.table is not None:
            self.row = []
            self.table.append(self.row)
        if tag in ("td", "th") and self.row is not None:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "figure":
            self.fig = None
        if tag == "table":
            self.table = None
        if tag in ("td", "th") and self.cell is not None:
            self.row.append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def nums(s):
    return np.array([float(v) for v in s.split()])


CHROME = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
          "--enable-logging=stderr", "--v=0", "--host-resolver-rules=MAP * ~NOTFOUND",
          "--no-first-run", "--disable-extensions"]


def chromium(page, *extra):
    """(DOM after load, console lines) of headless Chromium on the file page."""
    e = dict(os.environ, HOME=os.path.join(work, "home"))
    prof = os.path.join(work, "chrome-profile")
    p = subprocess.run(CHROME + [f"--user-data-dir={prof}", *extra, "file://" + page],
                       capture_output=True, text=True, timeout=180, env=e)
    return p.stdout, [l for l in p.stderr.splitlines() if "CONSOLE" in l], p


def png_check(path, w, h, label):
    """a PNG of w x h with more than a few colours in it"""
    data = open(path, "rb").read()
    if not check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{label}: {path} is not a PNG"):
        return
    W, H, depth, ctype = struct.unpack(">IIBB", data[16:26])
    check((W, H) == (w, h), f"{label}: screenshot {W}x{H}, expected {w}x{h}")
    idat, i = b"", 8
    while i < len(data):
        n, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind == b"IDAT":
            idat += data[i + 8:i + 8 + n]
        i += 12 + n
    raw = zlib.decompress(idat)
    bpp = {2: 3, 6: 4}.get(ctype, 1) * depth // 8
    stride = 1 + W * bpp
    # the filter bytes make exact colours hard to read back; distinct byte strings of rows suffice
    rows = {raw[r * stride:(r + 1) * stride] for r in range(0, H, 8)}
    check(len(rows) > 20 and len(set(raw[::97])) > 8,
          f"{label}: the screenshot looks blank ({len(rows)} distinct rows)")


def render(label, page, want, shot=None):
    """the page in Chromium: its DOM parsed, no console line, every wanted plot drawn"""
    text = open(page, encoding="utf-8").read()
    low = text.lower()
    check("http://" not in low and "https://" not in low, f"{label}: an http(s) URL in the page")
    check("<script" not in low and "<link" not in low and " src=" not in low and " href=" not in low,
          f"{label}: the page refers to another file (script, link, src or href)")
    dom, console, p = chromium(page, "--dump-dom")
    check(p.returncode == 0 and "</html>" in dom, f"{label}: chromium --dump-dom failed "
          f"(exit {p.returncode}): {p.stderr[-500:]}")
    check(not console, f"{label}: console messages: {console[:3]}")
    pg = Page()
    pg.feed(dom)
    for fid in want:
        f = pg.figs.get(fid)
        if not check(f is not None, f"{label}: no plot {fid} (plots: {sorted(pg.figs)})"):
            continue
        drawn = sum(len(a.get("d", "").split("L")) > 1 for a in f["paths"]) + f["rects"]
        check(f["svg"] == 1 and drawn > 0, f"{label}: plot {fid} is empty")
    if shot:
        _, console, p = chromium(page, f"--screenshot={shot}", "--window-size=1280,2400")
        check(p.returncode == 0 and os.path.exists(shot), f"{label}: no screenshot")
        check(not console, f"{label}: console messages on the screenshot run: {console[:3]}")
        if os.path.exists(shot):
            png_check(shot, 1280, 2400, label)
    print(f"{label}: chromium loaded the page, {len(pg.figs)} plots, no console message",
          flush=True)
    return pg


def series(pg, fid, label):
    for a in pg.figs[fid]["paths"]:
        if a.get("data-label") == label:
            return nums(a["data-y"])
    sys.exit(f"FAIL: {fid}: no series {label}")


def group(pg, fid, cls):
    for a in pg.figs[fid]["groups"]:
        if a.get("class") == cls:
            return a
    sys.exit(f"FAIL: {fid}: no <g class={cls}>")


def close(label, got, want, rtol=1e-8):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    ok = got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=1e-12, equal_nan=True)
    return check(ok, f"{label}: page {got[:6]} vs numpy {want[:6]}")


# ---- the numbers of each plot against numpy over the output --------------------------------------
def check_norms(label, pg, out, names, tokenizer):
    with h5py.File(out, "r") as f:
        rows = [norm_rows(f, n) for n in names]
        hists = [f[f"norm_profile/{n}/hist"][()] for n in names]
    close(f"{label}: mean norm by layer", series(pg, "norm-by-layer", "mean"),
          [r[0].mean() for r in rows])
    for k, q in enumerate(QS):
        band = pg.figs["norm-by-layer"]["bands"]
        got = series(pg, "norm-by-layer", "median") if q == 0.5 else \
            nums(band[0 if q in (0.05, 0.95) else 1]["data-lo" if q < 0.5 else "data-hi"])
        close(f"{label}: percentile {q}", got, [hist_quantile(h, edges(), q) for h in hists])
    med = series(pg, "norm-by-layer", "median")
    for n, r, m in zip(names, rows, med):  # the true median lies within the interpolated one's bin
        true = np.median(r[0])
        check(abs(np.log2(m / true)) <= 0.25 + 1e-9, f"{label}: {n}: median {m} vs true {true}")
    T = max(r[2].max() + 1 for r in rows)  # up to the last position reached
    B = -(-T // 256)  # docs/report.md: more than 256 positions are drawn as blocks of B
    for n, r in zip(names, rows):
        blk = r[2] // B
        mean = series(pg, "norm-mean-by-position", n)
        cnt = np.bincount(blk, minlength=-(-T // B))
        want = np.bincount(blk, r[0], minlength=len(cnt)) / np.where(cnt, cnt, 1)
        close(f"{label}: {n}: mean norm by position", mean, np.where(cnt, want, np.nan))
        mx = series(pg, "norm-max-by-position", n)
        close(f"{label}: {n}: max norm by position", mx,
              [r[0][blk == b].max() if cnt[b] else np.nan for b in range(len(cnt))])
    table = pg.tables.get("outliers", [])[1:]
    for n, r in zip(names, rows):
        mine = [row for row in table if row[0] == n]
        o = np.argmax(r[0])
        if check(len(mine) == 5, f"{label}: {n}: {len(mine)} outlier rows, expected 5"):
            got = [int(v) for v in mine[0][2:5]]
            check(got == [r[1][o], r[2][o], r[3][o]], f"{label}: {n}: largest norm at "
                  f"{got}, numpy says prompt {r[1][o]} position {r[2][o]} token {r[3][o]}")
            check(bool(mine[0][5]) == tokenizer, f"{label}: {n}: token text {mine[0][5]!r}")
    print(f"{label}: norm by layer, percentiles, by position and outliers == numpy", flush=True)


def check_stats(label, pg, out):
    with h5py.File(out, "r") as f:
        names = sorted(f["stats"])
        means = {n: f[f"stats/{n}/mean"][()].ravel() for n in names}
    ids = [i for i in pg.figs if i.startswith("stats-mean-")]
    check(len(ids) == len(names), f"{label}: {len(ids)} mean histograms for {len(names)} /stats")
    # natural order (layers in order); the first and the last checked bin by bin
    for i in (0, len(ids) - 1):
        cap = pg.figs[f"stats-mean-{i}"]
        g = group(pg, f"stats-mean-{i}", "bars")
        lo, hi = float(g["data-lo"]), float(g["data-hi"])
        hit = [n for n in names if abs(means[n].min() - lo) < 1e-7 * max(1, abs(lo)) and
               abs(means[n].max() - hi) < 1e-7 * max(1, abs(hi))]
        if not check(hit, f"{label}: stats-mean-{i}: range [{lo}, {hi}] is no /stats mean's"):
            continue
        m = means[hit[0]]
        b = np.clip(((m - m.min()) / (m.max() - m.min()) * 30).astype(np.int64), 0, 29)
        check(np.array_equal(nums(g["data-y"]), np.bincount(b, minlength=30)),
              f"{label}: stats-mean-{i}: counts differ from numpy's")
        check(cap["kind"] == "hist", f"{label}: stats-mean-{i} is not a histogram")
    print(f"{label}: {len(ids)} feature mean/variance histogram pairs == numpy", flush=True)


def block_mean(a):
    """docs/report.md: a side longer than 64 as block means of ceil(side / 64)"""
    bq, bk = -(-a.shape[0] // 64), -(-a.shape[1] // 64)
    return np.array([[a[r:r + bq, c:c + bk].mean() for c in range(0, a.shape[1], bk)]
                     for r in range(0, a.shape[0], bq)])


def check_attention(label, pg, out, names, prompts):
    with h5py.File(out, "r") as f:
        L = f["prompts/length"][()]
        k = 0
        for n in names:
            x = f["activations/" + n]
            two = list(x.attrs["stored_axes"])[3] == "global+local-key"
            for p in prompts:
                T = L[p]
                want = block_mean(x[p, :, :T, :(2 * T if two else T)].astype(np.float64).mean(0))
                g = group(pg, f"attention-{k}", "heatmap")
                got = nums(g["data-v"]).reshape(int(g["data-rows"]), int(g["data-cols"]))
                close(f"{label}: {n} prompt {p}: head-mean pattern", got, want, 1e-7)
                k += 1
    check(not any(i.startswith("attention-") and int(i.split("-")[1]) >= k for i in pg.figs),
          f"{label}: more attention plots than {k}")
    print(f"{label}: {k} attention patterns == numpy (prompts {prompts})", flush=True)


def expert_counts(out, E):
    """per block: np.bincount of its expert_indices over stored tokens, its mean router entropy"""
    with h5py.File(out, "r") as f:
        names = sorted((n for n in f["activations"] if n.endswith("expert_indices")),
                       key=lambda s: int(s.split(".")[1]))
        L = f["prompts/length"][()]
        res = []
        for n in names:
            x, z = f["activations/" + n], f["activations/" + n.replace("expert_indices",
                                                                         "router_logits")]
            tok = x.attrs["stored_axes"][0] == "token"
            idx = x[()] if tok else np.concatenate([x[p, :T] for p, T in enumerate(L)])
            lg = z[()] if tok else np.concatenate([z[p, :T] for p, T in enumerate(L)])
            lg = lg.astype(np.float64)
            pr = np.exp(lg - lg.max(1, keepdims=True))
            pr /= pr.sum(1, keepdims=True)
            ent = -(pr * np.log(np.where(pr > 0, pr, 1))).sum(1).mean()
            res.append((n, np.bincount(idx.ravel(), minlength=E), ent))
    return res


def check_experts(label, pg, out, E):
    res = expert_counts(out, E)
    g = group(pg, "expert-load", "heatmap")
    got = nums(g["data-v"]).reshape(int(g["data-rows"]), int(g["data-cols"]))
    close(f"{label}: expert load", got, np.stack([r[1] for r in res]), 0)
    close(f"{label}: router entropy", series(pg, "router-entropy", "mean router entropy"),
          [r[2] for r in res])
    print(f"{label}: expert load {got.sum(1).astype(int).tolist()} and router entropy == numpy",
          flush=True)


def check_selection(label, pg, out):
    names = ["n_tokens_selected", "n_tokens_skipped_first", "n_tokens_skipped_id",
             "n_tokens_not_chosen", "n_tokens_dropped_norm"]
    with h5py.File(out, "r") as f:
        want = [int(f.attrs[n]) for n in names if n in f.attrs]
    got = nums(group(pg, "selection-counts", "bars")["data-y"])
    close(f"{label}: selection counts", got, want, 0)


def report(out, html, *extra, code=0):
    return run(harvest, "report", out, "-o", html, "--quiet", *extra, check=code)


# ---- the three models -----------------------------------------------------------------------------
def harvest_model(name, init, acts, vocab, layout="prompt", extra=None,
                  lengths=(9, 14, 21, 5, 17, 12), profile=None):
    """the output of a run; profile: the values of its norm profile (job key "norm_profile")"""
    d = f"{work}/{name}"
    os.makedirs(d)
    run(harvest, *init, f"{d}/model", check=0)
    write_prompts(f"{d}/prompts.jsonl", lengths, seed=3, vocab=vocab)
    job = dict(activations=acts, max_seq_len=32, batch_size=2, statistics=True,
               select={"skip_first": 1}, output={"path": "out.h5", "layout": layout})
    job.update(extra or {})
    if profile:
        job["norm_profile"] = profile
    run(harvest, "run", write_job(f"{d}/job.json", **job), "--quiet", check=0)
    return f"{d}/out.h5"


os.makedirs(f"{work}/home", exist_ok=True)
# the spec model with its tokenizer (ids below its vocabulary, so each outlier has a text)
spec_names = [f"encoder_{i}_output" for i in range(4)] + [f"decoder_{i}_output" for i in range(4)]
spec = harvest_model("spec", ["init-model", "--family", "encdec", "--seed", "1"],
                     ["encoder_*_output", "decoder_*_output", "encoder_0_attn_probs",
                      "decoder_3_attn_probs"], 3000, profile=spec_names)
shutil.copy(os.path.join(HERE, "..", "data", "tokenizer.json"), f"{work}/spec/model")
llama = harvest_model("llama", ["init-model", "--family", "llama", "--preset", "Llama-3.2-1B"],
                      ["layers.*.layer_output", "layers.0.attention_probabilities",
                       "layers.1.attention_probabilities"], 96,
                      profile=["layers.0.layer_output", "layers.1.layer_output"])
moe_names = [f"layers.{i}.layer_output" for i in range(3)]
moe = harvest_model("moe", ["init-model", "--family", "qwen3_moe", "--preset", "Qwen3-MoE"],
                    ["layers.*.layer_output", "layers.*.expert_indices", "layers.*.router_logits",
                     "layers.2.attention_probabilities"], 96, profile=moe_names)
print("three outputs harvested", flush=True)

BASE = ["norm-by-layer", "norm-mean-by-position", "norm-max-by-position", "selection-counts",
        "stats-mean-0", "stats-var-0", "attention-0"]
os.makedirs(f"{work}/pages")
shots = f"{work}/pages"

report(spec, f"{shots}/spec.html", "--prompts", "0,2")
pg = render("spec", f"{shots}/spec.html", BASE + ["attention-3"], f"{shots}/spec.png")
check_norms("spec", pg, spec, spec_names, True)
check_stats("spec", pg, spec)
check_attention("spec", pg, spec, ["decoder_3_attn_probs", "encoder_0_attn_probs"], [0, 2])
check_selection("spec", pg, spec)
check(set(pg.notes) == {"expert_indices", "router_logits"}, f"spec: notes {pg.notes}")

report(llama, f"{shots}/llama.html")
pg = render("llama", f"{shots}/llama.html", BASE + ["attention-1"], f"{shots}/llama.png")
check_norms("llama", pg, llama, ["layers.0.layer_output", "layers.1.layer_output"], False)
check_stats("llama", pg, llama)
check_attention("llama", pg, llama, ["layers.0.attention_probabilities",
                                     "layers.1.attention_probabilities"], [0])
check_selection("llama", pg, llama)
check("expert-load" not in pg.figs and "expert_indices" in pg.notes,
      f"llama: a dense model's page has no expert plot but a note ({pg.notes})")

report(moe, f"{shots}/moe.html")
pg = render("moe", f"{shots}/moe.html", BASE + ["expert-load", "router-entropy"],
            f"{shots}/moe.png")
check_norms("moe", pg, moe, moe_names, False)
check_stats("moe", pg, moe)
check_attention("moe", pg, moe, ["layers.2.attention_probabilities"], [0])
check_experts("moe", pg, moe, 4)
check_selection("moe", pg, moe)
check(pg.notes == [], f"moe: notes {pg.notes}")

# the token layout's rows (a block of token rows at a time); no /norm_profile: its note
moet = harvest_model("moe_token", ["init-model", "--family", "qwen3_moe", "--preset", "Qwen3-MoE"],
                     ["layers.*.layer_output", "layers.*.expert_indices", "layers.*.router_logits"],
                     96, layout="token")
report(moet, f"{shots}/moet.html")
pg = render("moe token layout", f"{shots}/moet.html", ["expert-load", "router-entropy"])
check_experts("moe token layout", pg, moet, 4)
check({"norm_profile", "attention"} <= set(pg.notes) and "norm-by-layer" not in pg.figs,
      f"moe token layout: the missing parts' notes {pg.notes}")

# long prompts: attention patterns as block means (299 queries x 598 keys: 60 x 60 cells of 5 x
# 10, the last row and column smaller), norms by position in blocks of 2 positions (299 > 256);
# the page's numbers read from the file itself
lng = harvest_model("long", ["init-model", "--family", "encdec", "--seed", "2"],
                    ["encoder_0_output", "encoder_0_attn_probs", "decoder_0_attn_probs"], 3000,
                    extra={"max_seq_len": 300}, lengths=(70, 299), profile=["encoder_0_output"])
report(lng, f"{shots}/long.html", "--prompts", "1,0")
pg = Page()
pg.feed(open(f"{shots}/long.html", encoding="utf-8").read())
check_attention("long prompts", pg, lng, ["decoder_0_attn_probs", "encoder_0_attn_probs"], [1, 0])
check(len(series(pg, "norm-mean-by-position", "encoder_0_output")) == 150,
      "long prompts: 299 positions are not 150 blocks of 2")
check_norms("long prompts", pg, lng, ["encoder_0_output"], False)

# the console check can fail: a page that logs is caught
with open(f"{shots}/logs.html", "w") as f:
    f.write("<!DOCTYPE html><html><body><script>console.error('x')</script></body></html>")
_, console, _ = chromium(f"{shots}/logs.html", "--dump-dom")
check(console, "a page logging to the console was not caught")


# ---- adversarial: exit 1 naming the file or flag, nothing written, the output unchanged ---------
def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def refused(label, out, html, *extra, names=None):
    before = digest(out) if os.path.isfile(out) else None
    p = report(out, html, *extra, code=1)
    for n in names or [out]:
        check(n in p.stderr, f"{label}: the message does not name {n}: {p.stderr.strip()}")
    check(not os.path.exists(html + ".tmp"), f"{label}: {html}.tmp left behind")
    if before:
        check(digest(out) == before, f"{label}: the output changed")
    print(f"{label}: exit 1: {p.stderr.strip().splitlines()[-1]}", flush=True)


adv = f"{work}/adv"
os.makedirs(adv)
shutil.copy(moe, f"{adv}/renamed.h5")  # the master alone, under another name
refused("renamed copy", f"{adv}/renamed.h5", f"{adv}/r1.html")
check(not os.path.exists(f"{adv}/r1.html"), "renamed copy: a page was written")
os.makedirs(f"{adv}/copy")
shutil.copy(moe, f"{adv}/copy/out.h5")
shutil.copytree(moe + ".parts", f"{adv}/copy/out.h5.parts")
seg = sorted(s for s in os.listdir(f"{adv}/copy/out.h5.parts") if s.startswith("seg-"))[0]
os.remove(f"{adv}/copy/out.h5.parts/{seg}")
refused("a segment missing", f"{adv}/copy/out.h5", f"{adv}/r2.html")
os.makedirs(f"{adv}/stopped")  # a run stopped before its end: complete 0
shutil.copy(moe, f"{adv}/stopped/out.h5")
shutil.copytree(moe + ".parts", f"{adv}/stopped/out.h5.parts")
with h5py.File(f"{adv}/stopped/out.h5", "a") as f:
    f.attrs["complete"] = np.int64(0)
refused("an incomplete output", f"{adv}/stopped/out.h5", f"{adv}/r6.html")
os.makedirs(f"{adv}/badprof")  # a norm profile whose hist is not 130 bins
shutil.copy(spec, f"{adv}/badprof/out.h5")
shutil.copytree(spec + ".parts", f"{adv}/badprof/out.h5.parts")
with h5py.File(f"{adv}/badprof/out.h5", "a") as f:
    del f["norm_profile/encoder_1_output/hist"]
    f["norm_profile/encoder_1_output/hist"] = np.zeros(129, np.int64)
refused("a malformed norm profile", f"{adv}/badprof/out.h5", f"{adv}/r7.html",
        names=[f"{adv}/badprof/out.h5", "/norm_profile/encoder_1_output"])
refused("-o the input", moe, moe)
refused("-o a file of the parts folder", moe, moe + ".parts/index.h5",
        names=[moe + ".parts/index.h5"])
refused("a missing output", f"{adv}/nothing.h5", f"{adv}/r3.html")
refused("-o in a folder that does not exist", moe, f"{adv}/no/such/r.html",
        names=[f"{adv}/no/such/r.html"])
open(f"{adv}/file", "w").close()
refused("-o under a regular file", moe, f"{adv}/file/r.html", names=[f"{adv}/file/r.html"])
if os.geteuid() != 0:  # root writes into a mode 555 folder anyway
    os.makedirs(f"{adv}/ro")
    os.chmod(f"{adv}/ro", 0o555)
    refused("-o in an unwritable folder", moe, f"{adv}/ro/r.html", names=[f"{adv}/ro/r.html"])
os.makedirs(f"{adv}/folder.html")
refused("-o a folder", moe, f"{adv}/folder.html", names=[f"{adv}/folder.html"])
tok = f"{work}/spec/model/tokenizer.json"
before = digest(tok)
refused("-o the tokenizer it reads", spec, tok, names=[tok])
check(digest(tok) == before, "-o the tokenizer: the tokenizer changed")
refused("--prompts beyond the output", moe, f"{adv}/r4.html", "--prompts", "0,6",
        names=[moe, "prompt 6"])
refused("--prompts not a number", moe, f"{adv}/r5.html", "--prompts", "1x", names=["--prompts"])
p = run(harvest, "report", moe, check=1)
check("-o" in p.stderr, f"no -o: {p.stderr.strip()}")
# an existing page is replaced whole
report(moe, f"{adv}/again.html")
report(spec, f"{adv}/again.html")
check("spec" in open(f"{adv}/again.html").read() and not os.path.exists(f"{adv}/again.html.tmp"),
      "a second report over the first did not replace it")

# the screenshot the README shows (docs/report.png) comes from the MoE page: keep it for make-docs
if os.environ.get("REPORT_SHOT"):
    shutil.copy(f"{shots}/moe.png", os.environ["REPORT_SHOT"])
if os.environ.get("REPORT_KEEP"):  # keep the outputs and pages when all passed (a failure keeps them)
    import util
    if not util.failures:
        sys.exit(print(f"all checks passed; kept {work}"))
finish()
