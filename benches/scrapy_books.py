"""Baseline for BENCHMARKS.md ("Crawl speed", "Against nginx and Scrapy"): Scrapy crawling
the same lab site with the same logic as examples/books.rs (follow every link; book pages
give one item), politeness off.

    python3 benches/scrapy_books.py http://127.0.0.1:18080/

Prints pages, items, wall seconds, pages/s, CPU seconds per 1,000 pages and peak RSS, in
the format of `cargo bench --bench crawl` (which runs this script in its `compare` mode).
"""
import resource
import sys
import time

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy import signals

START = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:18080/"
counts = {"pages": 0, "items": 0}


class Books(scrapy.Spider):
    name = "books"
    start_urls = [START]

    def parse(self, response):
        counts["pages"] += 1
        for href in response.css("a::attr(href)").getall():
            if "/book-" in href or href.startswith("book-"):
                yield response.follow(href, callback=self.parse_book)
            else:
                yield response.follow(href, callback=self.parse)

    def parse_book(self, response):
        counts["pages"] += 1
        counts["items"] += 1
        yield {
            "url": response.url,
            "title": response.css("div.product h1::text").get(),
            "price": response.css("div.product p.price::text").get(),
            "stock": response.css("div.product p.stock::text").get(),
        }


process = CrawlerProcess(
    settings={
        "LOG_LEVEL": "WARNING",
        "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS": 64,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 64,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "FEEDS": {"/tmp/scrapy_books.jsonl": {"format": "jsonlines", "overwrite": True}},
    }
)
process.crawl(Books)
t0 = time.time()
process.start()
wall = time.time() - t0
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime
pages = max(counts["pages"], 1)
print(
    f"scrapy pages={counts['pages']} items={counts['items']} wall={wall:.2f}s "
    f"pages/s={counts['pages'] / wall:.0f} cpu_s_per_1000_pages={cpu / pages * 1000:.3f} "
    f"peak_rss_mib={usage.ru_maxrss / 1024:.1f}"
)
