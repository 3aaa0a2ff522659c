"""A spider fed by its `spider_idle` signal (as scrapy-redis feeds one): each time the
crawl runs out of work the handler schedules the next batch of product pages and raises
DontCloseSpider, until no batch is left; custom counters in the handler and the callback.

Run: scrapy runspider feeder.py -a base=URL -a summary=FILE -O items.jsonl
Ported in tests/scrapy_port.rs (`Feeder`).
"""

import json
from urllib.parse import urlparse

import scrapy
from scrapy import signals
from scrapy.exceptions import DontCloseSpider

BATCHES = [["/product/1", "/product/2"], ["/product/3", "/product/4"], ["/product/11"]]


class Feeder(scrapy.Spider):
    name = "feeder"
    custom_settings = {"ROBOTSTXT_OBEY": True, "RETRY_TIMES": 2}

    def __init__(self, base, summary, **kwargs):
        super().__init__(**kwargs)
        self.base = base
        self.summary = summary
        self.next_batch = 1

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.idle, signal=signals.spider_idle)
        return spider

    def batch(self, n):
        for path in BATCHES[n]:
            yield scrapy.Request(self.base + path, meta={"batch": n})

    async def start(self):
        for request in self.batch(0):
            yield request

    def idle(self, spider):
        if self.next_batch >= len(BATCHES):
            return
        for request in self.batch(self.next_batch):
            self.crawler.engine.crawl(request)
        self.next_batch += 1
        self.crawler.stats.inc_value("feeder/batches")
        raise DontCloseSpider

    def parse(self, response):
        self.crawler.stats.inc_value("feeder/pages")
        yield {
            "path": urlparse(response.url).path,
            "batch": response.meta["batch"],
            "title": response.css("h1::text").get(),
        }

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        counters = {k: v for k, v in stats.items() if k.startswith("feeder/")}
        with open(self.summary, "w") as f:
            json.dump({"reason": reason, "counters": counters}, f)
