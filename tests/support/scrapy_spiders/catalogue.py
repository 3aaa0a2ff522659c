"""Statuses a spider handles, its own counters and `closed(reason)`.

Run: scrapy runspider catalogue.py -a start=URL -a summary=FILE -O items.jsonl
Ported in tests/scrapy_port.rs (`Catalogue`).
"""

import json
from urllib.parse import urlparse

import scrapy


class Catalogue(scrapy.Spider):
    name = "catalogue"
    handle_httpstatus_list = [404, 410]
    custom_settings = {"ROBOTSTXT_OBEY": True, "RETRY_TIMES": 2}

    def __init__(self, start, summary, **kwargs):
        super().__init__(**kwargs)
        self.start_url = start
        self.summary = summary

    async def start(self):
        yield scrapy.Request(self.start_url)

    def parse(self, response):
        for href in response.css("a.product::attr(href)").getall():
            yield response.follow(href, self.parse_product)
        next_page = response.css("li.next a::attr(href)").get()
        if next_page is not None:
            yield response.follow(next_page, self.parse)

    def parse_product(self, response):
        path = urlparse(response.url).path
        if response.status == 404:
            self.crawler.stats.inc_value("catalogue/missing")
            yield {"path": path, "status": 404, "title": response.css("h1::text").get()}
            return
        if response.status == 410:
            self.crawler.stats.inc_value("catalogue/gone")
            yield response.follow(
                response.css("a.replacement::attr(href)").get(), self.parse_product
            )
            return
        self.crawler.stats.inc_value("catalogue/products")
        yield {
            "path": path,
            "status": response.status,
            "title": response.css("h1::text").get(),
            "price": response.css("p.price::text").re_first(r"[\d.]+"),
        }

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        counters = {k: v for k, v in stats.items() if k.startswith("catalogue/")}
        with open(self.summary, "w") as f:
            json.dump({"reason": reason, "counters": counters}, f)
