"""Headless Chromium for the explorer tests (and the README's screenshots): Debian's `chromium` driven by Playwright.

Only Playwright's Python package is used, never its own browser download: the system browser is launched by path.
`.ci/run` installs it with apt-get; where it is missing the browser tests skip and say why.
"""

import io
import os
import shutil

CHROMIUM = os.environ.get("KERAS_TFM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def why_no_browser():
    """None when the browser tests can run, else the reason they cannot."""
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright; its browser download is not needed)"
    return None


class Browser:
    """One headless Chromium; `open(html, folder)` writes a page, opens it from file:// and records console errors."""

    def __enter__(self):
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        return self

    def __exit__(self, *exc):
        self._browser.close()
        self._playwright.stop()

    def open(self, html, path, width=1100, height=800, ready="window.explorer !== undefined"):
        with open(path, "w", encoding="utf-8") as file:
            file.write(html)
        page = self._browser.new_page(viewport={"width": width, "height": height})
        page.errors = []
        page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.goto(f"file://{os.path.abspath(path)}")
        if ready:  # the explorer's script has run
            page.wait_for_function(ready)
        return page


def png_pixels(png):
    """`(height, width, channels)` float array of PNG bytes (matplotlib reads them)."""
    from matplotlib import image

    return image.imread(io.BytesIO(png), format="png")
