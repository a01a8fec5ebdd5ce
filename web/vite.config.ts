// Builds the web workspace into dist/, which the gateway serves at `/` (hashed assets under
// /assets are cached for a year; everything else falls back to index.html).
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

export default defineConfig({
  plugins: [react()],
  build: { outDir: "dist", assetsDir: "assets", sourcemap: false, chunkSizeWarningLimit: 600 },
  // `npm run dev` talks to a gateway on :8080 (same origin through the proxy, as in production).
  server: { proxy: { "/api": { target: "http://127.0.0.1:8080", ws: true } } },
});
