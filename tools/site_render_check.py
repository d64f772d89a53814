"""Loads pages of the built docs site in headless Chromium and says how each renders.

    python tools/site_render_check.py SITE_DIR [--shots DIR] [--search QUERY]... PAGE#ANCHOR ...

Serves SITE_DIR (``mkdocs build --site-dir SITE_DIR``) on a local port and drives Debian's
``chromium`` over the DevTools protocol (``--remote-debugging-pipe``: no package beyond the
standard library). Per page it prints one JSON line: the page it ended on (the former namespace
pages forward ``#anchor`` links to the topic pages), whether the anchor's element exists and where
it sits in the viewport after load (``top`` about 68: scrolled to it, under the header), the load
time (``loadEventEnd``), the DOM's size and element count, and a screenshot of the viewport when
``--shots`` is given. ``--search`` types each query into the site's search (Material reads ``?q=``)
and prints the first results.

Why not ``chromium --headless --screenshot URL#anchor``: that flag captures a blank viewport
whenever the page scrolls to an anchor, on any page of this site (an 82 KB guide page included),
so it cannot tell a page that does not render from one that does.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import pathlib
import subprocess
import tempfile
import threading
import time

CHROMIUM = "/usr/lib/chromium/chromium"  # the binary: Debian's /usr/bin/chromium wrapper drops fds
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-pipe",
         "--window-size=1280,900"]
MEASURE = """(() => {
  const id = decodeURIComponent(location.hash.slice(1));
  const element = id ? document.getElementById(id) : null;
  const nav = performance.getEntriesByType('navigation')[0];
  return JSON.stringify({page: location.pathname + location.hash, anchor: id, found: !!element,
    top: element ? Math.round(element.getBoundingClientRect().top) : null,
    load_ms: Math.round(nav.loadEventEnd - nav.startTime), dom_bytes: document.documentElement.outerHTML.length,
    elements: document.getElementsByTagName('*').length});
})()"""


class Browser:
  """Chromium driven over the DevTools protocol on fds 3 and 4 (NUL-separated JSON messages)."""

  def __init__(self, profile: str):
    to_chrome, self._to_chrome = os.pipe()
    self._from_chrome, from_chrome = os.pipe()

    def pipes() -> None:  # in the child: fd 3 reads our messages, fd 4 writes its answers
      a, b = os.dup(to_chrome), os.dup(from_chrome)
      os.dup2(a, 3)
      os.dup2(b, 4)

    self.process = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                    preexec_fn=pipes, close_fds=False, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
    os.close(to_chrome)
    os.close(from_chrome)
    self._id, self._buffer, self._events = 0, b"", []
    target = self.call("Target.createTarget", url="about:blank")["targetId"]
    self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    self.call("Page.enable", session=self.session)

  def _message(self) -> dict:
    while b"\0" not in self._buffer:
      chunk = os.read(self._from_chrome, 1 << 20)
      if not chunk:
        raise EOFError("chromium exited")
      self._buffer += chunk
    message, self._buffer = self._buffer.split(b"\0", 1)
    return json.loads(message)

  def call(self, method: str, session: str | None = None, **params) -> dict:
    self._id += 1
    message = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
    os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
    while True:
      answer = self._message()
      if answer.get("id") == self._id:
        if "error" in answer:
          raise RuntimeError(answer["error"])
        return answer["result"]
      self._events.append(answer)

  def evaluate(self, expression: str):
    return self.call("Runtime.evaluate", session=self.session, expression=expression,
                     returnByValue=True)["result"].get("value")

  def load(self, url: str) -> None:
    """Navigates and waits until the document shown (after any forwarding) has loaded."""
    for target in ("about:blank", url):
      self._events.clear()
      self.call("Page.navigate", session=self.session, url=target)
      while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
        self._events.append(self._message())
    for _ in range(100):  # a page that forwards with location.replace loads a second document
      time.sleep(0.1)
      try:
        if self.evaluate("document.readyState") == "complete" and _ > 5:
          return
      except RuntimeError:
        continue

  def close(self) -> None:
    self.process.kill()
    self.process.wait()


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
  parser.add_argument("site")
  parser.add_argument("pages", nargs="*")
  parser.add_argument("--shots")
  parser.add_argument("--search", action="append", default=[], help="a query (repeat the option)")
  args = parser.parse_intermixed_args()
  handler = functools.partial(_QuietHandler, directory=str(pathlib.Path(args.site).resolve()))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  base = f"http://127.0.0.1:{server.server_port}/"
  with tempfile.TemporaryDirectory() as profile:
    browser = Browser(profile)
    try:
      for index, page in enumerate(args.pages):
        browser.load(base + page)
        result = {"asked": page, **json.loads(browser.evaluate(MEASURE))}
        if args.shots:
          shot = pathlib.Path(args.shots) / f"{index:02d}.png"
          shot.write_bytes(base64.b64decode(browser.call("Page.captureScreenshot", session=browser.session)["data"]))
          result["shot"] = str(shot)
        print(json.dumps(result), flush=True)
      for query in args.search:
        browser.load(f"{base}?q={query}")
        links = "[]"
        for _ in range(100):
          links = browser.evaluate("JSON.stringify([...document.querySelectorAll('.md-search-result__item a')]"
                                   ".slice(0, 5).map(a => a.getAttribute('href').replace(location.origin, '')))")
          if json.loads(links):
            break
          time.sleep(0.2)
        print(json.dumps({"search": query, "results": json.loads(links)}), flush=True)
    finally:
      browser.close()
      server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
  def log_message(self, format, *args):  # noqa: A002 - the base class's signature
    pass


if __name__ == "__main__":
  main()
