// Playwright drives Debian's Chromium (HALYARD_CHROMIUM; browser downloads are impossible here)
// against the Halyard that `tests/tests/browser.rs` starts (HALYARD_URL).
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "tests",
  // Two cores: one browser at a time keeps timings sane.
  workers: 1,
  timeout: 90_000,
  expect: { timeout: 20_000 },
  reporter: [["list"]],
  outputDir: "test-results/artifacts",
  use: {
    baseURL: process.env.HALYARD_URL ?? "http://127.0.0.1:3000",
    viewport: { width: 1280, height: 800 },
    screenshot: "only-on-failure",
    trace: "off",
    launchOptions: {
      executablePath: process.env.HALYARD_CHROMIUM ?? "/usr/bin/chromium",
      args: ["--no-sandbox"],
    },
  },
});
