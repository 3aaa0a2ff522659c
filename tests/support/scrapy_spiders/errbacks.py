"""Errbacks that yield items: one per product page that fails (a status the spider does
not handle, after its retries; a page robots.txt forbids), with its own counters.

Run: scrapy runspider errbacks.py -a start=URL -a summary=FILE -O items.jsonl
Ported in tests/scrapy_port.rs (`Errbacks`).
"""

import json
from urllib.parse import urlparse

import scrapy
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.internet.error import ConnectionRefusedError


class Errbacks(scrapy.Spider):
    name = "errbacks"
    custom_settings = {"ROBOTSTXT_OBEY": True, "RETRY_TIMES": 2}

    def __init__(self, start, summary, **kwargs):
        super().__init__(**kwargs)
        self.start_url = start
        self.summary = summary

    async def start(self):
        yield scrapy.Request(self.start_url)

    def parse(self, response):
        for href in response.css("a.product::attr(href)").getall():
            yield response.follow(href, self.parse_product, errback=self.lost)
        next_page = response.css("li.next a::attr(href)").get()
        if next_page is not None:
            yield response.follow(next_page, self.parse)

    def parse_product(self, response):
        self.crawler.stats.inc_value("errbacks/found")
        yield {"path": urlparse(response.url).path, "title": response.css("h1::text").get()}

    def lost(self, failure):
        # HttpError is an IgnoreRequest too: asked first.
        status = None
        if failure.check(HttpError):
            kind, status = "status", failure.value.response.status
        elif failure.check(ConnectionRefusedError):
            kind = "connection"
        elif failure.check(IgnoreRequest):
            kind = "refused"
        else:
            kind = "other"
        self.crawler.stats.inc_value(f"errbacks/lost/{kind}")
        yield {"path": urlparse(failure.request.url).path, "lost": kind, "status": status}

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        counters = {k: v for k, v in stats.items() if k.startswith("errbacks/")}
        with open(self.summary, "w") as f:
            json.dump({"reason": reason, "counters": counters}, f)
