// A spare's pi loads the provider modules that pi-ai otherwise imports lazily at the first
// model call (measured: ~25 of the ~50 ms of a fresh pi's first prompt), so the first
// turn of the session that claims the spare does not pay for them. The same file URLs: pi-ai's
// later import() is served from the module cache. A failure here only costs that time.
const base = new URL("../../../node_modules/@mariozechner/pi-ai/dist/providers/", import.meta.url);
await Promise.all(["openai-completions.js", "anthropic.js"].map(
    (f) => import(new URL(f, base).href))).catch(() => {});
