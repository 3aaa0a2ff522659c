"""scrapy-playwright on the lab's JavaScript catalogue, for `cargo bench --bench browser`
(which runs this script and measures its process tree): the same pages as our crawl, the
same wait (the list filled by the page's script), the same blocked resource types, the same
Debian chromium.

    PAGES=100 TABS=4 [WAIT_MS=30000] python3 benches/scrapy_playwright_books.py http://127.0.0.1:PORT/

Prints one line: pages, items, wall seconds. Playwright cannot download its own browser
here, so it drives `CHROMIUM` (default /usr/bin/chromium) through `executable_path`.
"""
import os
import sys
import time

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy_playwright.page import PageMethod

BASE = sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:8080"
PAGES = int(os.environ.get("PAGES", "100"))
TABS = int(os.environ.get("TABS", "4"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# How long a page may wait for its list (ms): a page whose script was refused never fills it.
WAIT_MS = int(os.environ.get("WAIT_MS", "30000"))
counts = {"pages": 0, "items": 0}


def abort(request):
    # As our crawl's default `browser_block`: images, media and fonts are never loaded.
    return request.resource_type in ("image", "media", "font")


class JsBooks(scrapy.Spider):
    name = "js_books"

    async def start(self):
        # Scrapy 2.13 and later (`start_requests` before).
        for request in self.start_requests():
            yield request

    def start_requests(self):
        for n in range(1, PAGES + 1):
            yield scrapy.Request(
                f"{BASE}/js/page-{n}.html",
                meta={
                    "playwright": True,
                    "playwright_page_methods": [
                        PageMethod("wait_for_selector", "ul#books[data-loaded]", timeout=WAIT_MS),
                    ],
                },
            )

    def parse(self, response):
        counts["pages"] += 1
        for li in response.css("li.book"):
            counts["items"] += 1
            yield {
                "title": li.css("a.title::text").get(),
                "price": li.css("span.price::text").get(),
            }


process = CrawlerProcess(
    settings={
        "LOG_LEVEL": "WARNING",
        "ROBOTSTXT_OBEY": True,
        "USER_AGENT": "jsbench/1.0 (+http://127.0.0.1/)",
        "CONCURRENT_REQUESTS": TABS,
        "CONCURRENT_REQUESTS_PER_DOMAIN": TABS,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "DOWNLOAD_HANDLERS": {
            "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
            "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
        },
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": {"executable_path": CHROMIUM, "headless": True},
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": TABS,
        "PLAYWRIGHT_ABORT_REQUEST": abort,
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": 30_000,
        "FEEDS": {"/tmp/scrapy_playwright_books.jsonl": {"format": "jsonlines", "overwrite": True}},
    }
)
process.crawl(JsBooks)
t0 = time.time()
process.start()
wall = time.time() - t0
print(f"scrapy-playwright pages={counts['pages']} items={counts['items']} wall={wall:.2f}s")
