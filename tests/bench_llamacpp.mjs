// bench_llamacpp.mjs - llama.cpp's prefill of the prompts `harvest bench --model` makes, through
// node-llama-cpp (run by tests/bench_llamacpp.sh from the folder it is installed in).
//   node bench_llamacpp.mjs MODEL.gguf THREADS T PROMPTS VOCAB  -> prints tokens/s
// Token ids come from harvest/bench.c's generator (64-bit LCG, (s >> 33) % VOCAB), so both
// programs read the same ids. Each prompt is evaluated in a fresh sequence, whole (batch = T).
import { getLlama } from "node-llama-cpp";

const [path, threads, T, prompts, vocab] = process.argv.slice(2);
const n = Number(T), np = Number(prompts), V = BigInt(vocab);
const mask = (1n << 64n) - 1n;
let s = 42n;
const ids = [];
for (let p = 0; p < np; p++) {
    const row = [];
    for (let t = 0; t < n; t++) {
        s = (s * 6364136223846793005n + 1442695040888963407n) & mask;
        row.push(Number((s >> 33n) % V));
    }
    ids.push(row);
}
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
const context = await model.createContext({
    contextSize: n, batchSize: n, threads: Number(threads), sequences: 1,
});
let seconds = 0;
for (const row of ids) {
    const seq = context.getSequence();
    const t0 = process.hrtime.bigint();
    await seq.evaluateWithoutGeneratingNewTokens(row);
    seconds += Number(process.hrtime.bigint() - t0) * 1e-9;
    seq.dispose();
}
console.log((n * np / seconds).toFixed(1));
await context.dispose();
await model.dispose();
