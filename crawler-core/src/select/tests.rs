//! Selection tests. The `parsel_*` tests port the cases of parsel's own test suite
//! (`tests/test_selector.py`, `tests/test_selector_csstranslator.py`) with the answers parsel
//! gives, so a spider ported from Scrapy selects what it selected there.

use crate::response::test_page as page;
use crate::{ErrorKind, Response};

/// parsel's `x()` helper of its CSS tests: every result stripped, the empty ones dropped.
fn stripped(values: Vec<String>) -> Vec<String> {
    values
        .into_iter()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

fn no_problems(p: &Response) {
    let problems = p.problems();
    let problems = problems.lock().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn parsel_simple_selection() {
    let p = page("<input name='a' value='1'/><input name='b' value='2'/>");
    assert_eq!(p.xpath("//input").len(), 2);
    assert_eq!(p.xpath("//input[@name='a']/@name").getall(), ["a"]);
    assert_eq!(
        p.xpath("number(concat(//input[@name='a']/@value, //input[@name='b']/@value))")
            .getall(),
        ["12.0"],
        "numbers read as parsel prints them"
    );
    assert_eq!(p.xpath("concat('xpath', 'rules')").getall(), ["xpathrules"]);
    assert_eq!(
        p.xpath("concat(//input[@name='a']/@value, //input[@name='b']/@value)")
            .getall(),
        ["12"]
    );
    assert_eq!(p.xpath("//input[@name='a']/@name='a'").getall(), ["1"]);
    assert_eq!(p.xpath("//input[@name='a']/@name='n'").getall(), ["0"]);
    // Each node is a node of its own, with the same reading as the list's.
    let each: Vec<String> = p.xpath("//input").iter().map(|n| n.get()).collect();
    assert_eq!(each, p.xpath("//input").getall());
    no_problems(&p);
}

#[test]
fn parsel_unicode_query() {
    let p = page("<input name='\u{a9}' value='1'>");
    assert_eq!(p.xpath("//input[@name='\u{a9}']/@value").getall(), ["1"]);
}

#[test]
fn parsel_nested_selectors() {
    let p = page(
        "<body><div class='one'><ul><li>one</li><li>two</li></ul></div>\
         <div class='two'><ul><li>four</li><li>five</li><li>six</li></ul></div></body>",
    );
    let two = p.xpath("//div[@class='two']");
    let texts = |s: crate::Selection<'_>| s.texts().collect::<Vec<_>>();
    assert_eq!(
        texts(two.xpath("//li")),
        ["one", "two", "four", "five", "six"],
        "`//` starts from the document, as in parsel"
    );
    assert_eq!(texts(two.xpath("./ul/li")), ["four", "five", "six"]);
    assert_eq!(texts(two.xpath(".//li")), ["four", "five", "six"]);
    assert!(two.xpath("./li").is_empty());
    // From one node as from the list.
    let node = two.first().unwrap();
    assert_eq!(texts(node.xpath("ul/li[position() > 1]")), ["five", "six"]);
    assert_eq!(node.xpath("count(.//li)").get().as_deref(), Some("3.0"));
}

#[test]
fn parsel_re() {
    let p = page(
        "<div>Name: Mary<ul><li>Name: John</li><li>Age: 10</li><li>Name: Paul</li>\
         <li>Age: 20</li></ul>Age: 20</div>",
    );
    assert_eq!(p.xpath("//ul/li").re(r"Age: (\d+)"), ["10", "20"]);
    assert_eq!(p.xpath("//ul/li").re(r"Name: (\w+)"), ["John", "Paul"]);
    // No group: the whole match; a group named `extract`: the first match only.
    assert_eq!(p.xpath("//ul/li/text()").re(r"\d+"), ["10", "20"]);
    assert_eq!(
        p.xpath("//ul/li/text()").re(r"Name: (?P<extract>\w+)"),
        ["John", "Paul"],
        "of each node"
    );
    assert_eq!(p.xpath("//div").re(r"Name: (?P<extract>\w+)"), ["Mary"]);
    // Several groups: each of them.
    assert_eq!(
        p.xpath("//ul/li/text()").re(r"(\w+): (\w+)")[..4],
        ["Name", "John", "Age", "10"]
    );
    assert_eq!(
        p.xpath("//ul/li/text()").re_first(r"\d").as_deref(),
        Some("1")
    );
    assert_eq!(
        p.xpath("//ul/li/text()").re_first(r"Age: (\d+)").as_deref(),
        Some("10")
    );
    assert_eq!(p.xpath("/ul/li/text()").re_first(r"\w+"), None);
    assert_eq!(p.xpath("//ul/li/text()").re_first(r"^(\d+)$"), None);
    assert_eq!(
        p.select("li::text").first().unwrap().re(r"\w+"),
        ["Name", "John"]
    );
    no_problems(&p);

    let intl = page("<div>Evento: cumplea\u{f1}os</div>");
    assert_eq!(
        intl.xpath("//div").re(r"Evento: (\w+)"),
        ["cumplea\u{f1}os"]
    );
}

#[test]
fn parsel_get_and_extract_first() {
    let p = page(r#"<ul><li id="1">1</li><li id="2">2</li></ul>"#);
    assert_eq!(p.xpath("//ul/li/text()").get().as_deref(), Some("1"));
    assert_eq!(
        p.xpath("//ul/li[@id='1']/text()").get().as_deref(),
        Some("1")
    );
    assert_eq!(p.xpath("//ul/li[2]/text()").get().as_deref(), Some("2"));
    assert_eq!(p.xpath("//ul/li[last()]/@id").get().as_deref(), Some("2"));
    assert_eq!(p.xpath("/ul/li[@id='doesnt-exist']/text()").get(), None);
    assert_eq!(
        p.xpath("//li[@id='2']").get().as_deref(),
        Some(r#"<li id="2">2</li>"#),
        "an element reads as its HTML"
    );
}

#[test]
fn parsel_text_nodes_and_siblings() {
    let p = page("<div><b>Options:</b>opt1</div><div><b>Other</b>opt2</div>");
    assert_eq!(
        p.xpath("//div/descendant::text()[preceding-sibling::b[contains(text(), 'Options')]]")
            .getall(),
        ["opt1"]
    );
    assert_eq!(
        p.xpath("//div/descendant::text()/preceding-sibling::b[contains(text(), 'Options')]")
            .getall(),
        ["<b>Options:</b>"]
    );
    assert_eq!(
        p.xpath("//div/b[contains(text(), 'Options')]/following-sibling::text()")
            .getall(),
        ["opt1"]
    );
}

#[test]
fn xpath_functions_users_rely_on() {
    let p = page(
        "<h1>  A  Light\n in the Attic </h1><ul><li class='x a'>one</li><li>two</li>\
         <li class='x'>three</li></ul><p>Price: <b>£51.77</b></p><!-- note -->",
    );
    assert_eq!(
        p.xpath("normalize-space(//h1)").get().as_deref(),
        Some("A Light in the Attic")
    );
    assert_eq!(
        p.xpath("string(//p)").get().as_deref(),
        Some("Price: £51.77")
    );
    assert_eq!(p.xpath("count(//li)").get().as_deref(), Some("3.0"));
    assert_eq!(
        p.xpath("//li[contains(@class, 'x')]/text()").getall(),
        ["one", "three"]
    );
    assert_eq!(
        p.xpath("//li[starts-with(text(), 't')]")
            .texts()
            .collect::<Vec<_>>(),
        ["two", "three"]
    );
    assert_eq!(
        p.xpath("//li[position() = last()]/text()").getall(),
        ["three"]
    );
    assert_eq!(p.xpath("//li[position() < 3]").len(), 2);
    assert_eq!(
        p.xpath("substring-after(//p, ': ')").get().as_deref(),
        Some("£51.77")
    );
    assert_eq!(
        p.xpath("//comment()").get().as_deref(),
        Some("<!-- note -->")
    );
    assert_eq!(p.xpath("//li/@class").getall(), ["x a", "x"]);
    // Attributes read as text, and name themselves.
    let class = p.xpath("//li/@class").first().unwrap();
    assert_eq!(
        (class.name(), class.text()),
        ("class".to_owned(), "x a".to_owned())
    );
    assert!(!class.is_element());
    // `..` and ancestors.
    assert_eq!(p.xpath("//b/../@class").len(), 0);
    assert_eq!(
        p.xpath("name(//b/ancestor::*[1])").get().as_deref(),
        Some("p")
    );
    // The tree as lxml shows HTML: lower-case names in no namespace.
    assert_eq!(p.xpath("/html/body/h1").len(), 1);
    assert_eq!(p.xpath("//H1").len(), 0);
    // Our tidy text beside parsel's untouched one.
    assert_eq!(
        p.xpath("//h1/text()").text().as_deref(),
        Some("A Light in the Attic")
    );
    assert_eq!(
        p.xpath("//h1/text()").get().as_deref(),
        Some("  A  Light\n in the Attic ")
    );
    no_problems(&p);
}

/// parsel's CSS document of `test_selector_csstranslator.py`.
const CSS_BODY: &str = r#"<html><body><div>
 <a id="name-anchor" name="foo"></a>
 <a id="tag-anchor" rel="tag" href="http://localhost/foo">link</a>
 <a id="nofollow-anchor" rel="nofollow" href="https://example.org"> link</a>
 <p id="paragraph">
   lorem ipsum text
   <b id="p-b">hi</b> <em id="p-em">there</em>
   <b id="p-b2">guy</b>
   <input type="checkbox" id="checkbox-unchecked" />
 </p>
 <map name="dummymap">
   <area shape="circle" coords="200,250,25" href="foo.html" id="area-href" />
   <area shape="default" id="area-nohref" />
 </map>
</div>
<div class="cool">
    <span id="foobar-span">foo ter</span>
</div>
</body></html>"#;

#[test]
fn parsel_css_text_pseudo_element() {
    let p = page(CSS_BODY);
    let x = |css: &str| stripped(p.select(css).getall());
    assert_eq!(x("#p-b2"), [r#"<b id="p-b2">guy</b>"#]);
    assert_eq!(x("#p-b2::text"), ["guy"]);
    assert_eq!(x("#p-b2 ::text"), ["guy"]);
    assert_eq!(x("#paragraph::text"), ["lorem ipsum text"]);
    assert_eq!(
        x("#paragraph ::text"),
        ["lorem ipsum text", "hi", "there", "guy"]
    );
    assert_eq!(x("p::text"), ["lorem ipsum text"]);
    assert_eq!(x("p ::text"), ["lorem ipsum text", "hi", "there", "guy"]);
    assert_eq!(x("#paragraph > ::text"), ["hi", "there", "guy"]);
    assert_eq!(
        x("span::text, #p-b::text"),
        ["hi", "foo ter"],
        "document order across parts"
    );
    assert_eq!(x("a[href]::text"), ["link", "link"]);
    // The text of everything, in document order, from the document or an element.
    assert_eq!(x("::text").len(), 7);
    let div = p.select("div.cool").first().unwrap();
    assert_eq!(stripped(div.select("::text").getall()), ["foo ter"]);
    no_problems(&p);
}

#[test]
fn parsel_css_attribute_function() {
    let p = page(CSS_BODY);
    let x = |css: &str| stripped(p.select(css).getall());
    assert_eq!(x("#p-b2::attr(id)"), ["p-b2"]);
    assert_eq!(x(".cool::attr(class)"), ["cool"]);
    assert!(x(".cool::attr(id)").is_empty());
    assert_eq!(x("ul::attr(id),div::attr(class)"), ["cool"]);
    assert!(x("#p-b2::attr(dummy)").is_empty());
    assert_eq!(
        x("a::attr(href)"),
        ["http://localhost/foo", "https://example.org"]
    );
    assert_eq!(x("map ::attr(href)"), ["foo.html"]);
    // Selections read attributes the same whichever way they are asked for.
    assert_eq!(p.select("a::attr(href)").get(), p.select("a").attr("href"));
    no_problems(&p);
}

#[test]
fn parsel_css_nested_selector() {
    let p = page(CSS_BODY);
    assert_eq!(p.select("p").select("b::text").getall(), ["hi", "guy"]);
    assert_eq!(p.select("div").select("area:last-child").len(), 1);
    assert_eq!(
        p.select("div")
            .select("area:last-child")
            .attr("id")
            .as_deref(),
        Some("area-nohref")
    );
    // CSS and XPath mix on the same nodes.
    assert_eq!(p.select("p").xpath("./b/text()").getall(), ["hi", "guy"]);
    assert_eq!(
        p.xpath("//p").select("em::text").get().as_deref(),
        Some("there")
    );
}

#[test]
fn css_text_beside_our_text() {
    let p = page("<h1> Title <small>extra</small> </h1>");
    assert_eq!(
        p.select("h1").text().as_deref(),
        Some("Title extra"),
        "all text below, tidied"
    );
    assert_eq!(
        p.select("h1::text").getall(),
        [" Title ", " "],
        "own text nodes, untouched"
    );
    assert_eq!(p.select("h1::text").text().as_deref(), Some("Title"));
    assert_eq!(p.text_of("h1::text").unwrap(), "Title");
    assert_eq!(
        p.select_first("h1 small::text").map(|n| n.get()).as_deref(),
        Some("extra")
    );
}

#[test]
fn invalid_css_names_expression_and_position() {
    let p = page("<p>x</p>");
    let err = |css: &str| {
        p.try_select(css)
            .err()
            .unwrap_or_else(|| panic!("{css} was accepted"))
    };
    let e = err("p[");
    assert_eq!(e.kind(), ErrorKind::Selector);
    assert!(
        e.to_string()
            .contains("invalid CSS selector 'p[' at position 3: the selector ends too soon"),
        "{e}"
    );
    let e = err("h1:foo");
    assert!(
        e.to_string()
            .contains("at position 3: unknown pseudo-class or pseudo-element ':foo'"),
        "{e}"
    );
    let e = err("a::text b");
    assert!(
        e.to_string()
            .contains("at position 2: '::text' may only end a selector"),
        "{e}"
    );
    let e = err("div >");
    assert!(
        e.to_string().contains("a combinator with nothing after it"),
        "{e}"
    );
    let e = err("a::attr()");
    assert!(
        e.to_string().contains("'::attr()' needs an attribute name"),
        "{e}"
    );
    // XPath given to select: say so.
    for xpath in ["//a/@href", "//h1/text()", "./div"] {
        let e = err(xpath);
        assert!(
            e.to_string()
                .contains("this is XPath: use xpath() instead of select()"),
            "{e}"
        );
    }
    // No message is the selector crate's own.
    for css in ["", "a, , b", "div..x", "::before", "a >> b"] {
        let e = err(css);
        let msg = e.to_string();
        assert!(
            !msg.contains("report this to the developer") && !msg.contains("Unexpected"),
            "{msg}"
        );
        assert!(msg.contains(&format!("'{css}' at position")), "{msg}");
    }
    no_problems(&p);
}

#[test]
fn invalid_xpath_names_expression_and_position() {
    let p = page("<p>x</p>");
    let e = p.try_xpath("//test[").err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Selector);
    assert!(
        e.to_string()
            .starts_with("invalid XPath '//test[' at position"),
        "{e}"
    );
    let e = p.try_xpath("h1::text").err().unwrap();
    assert!(
        e.to_string()
            .contains("this is CSS: use select() instead of xpath()"),
        "{e}"
    );
    let e = p.try_xpath("nosuch(//p)").err().unwrap();
    assert!(
        e.to_string()
            .contains("XPath 'nosuch(//p)' cannot be evaluated: unknown function"),
        "{e}"
    );
    no_problems(&p);
    // Through the recording methods, the page is failed (once per expression).
    assert!(p.xpath("//test[").is_empty());
    assert!(p.xpath("//test[").is_empty());
    assert!(p.select("p").xpath("//test[").is_empty());
    assert!(p.select("p").re("(").is_empty());
    let problems = p.problems();
    let problems = problems.lock().unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[1]
            .to_string()
            .contains("invalid regular expression '('"),
        "{problems:?}"
    );
}

#[test]
fn selections_from_text_and_values_select_nothing() {
    let p = page("<p>x <b>y</b></p>");
    let text = p.xpath("//p/text()");
    assert!(text.select("b").is_empty());
    assert!(text.first().unwrap().attr("href").is_none());
    assert_eq!(text.first().unwrap().name(), "");
    let value = p.xpath("count(//b)");
    assert!(value.xpath("..").is_empty());
    assert_eq!(value.text().as_deref(), Some("1.0"));
    // Attribute and text selections have no attributes of their own.
    assert_eq!(p.xpath("//p/text()").attrs("href").count(), 0);
    // The document itself, from `/`.
    assert!(p.xpath("/").get().unwrap().contains("<p>x <b>y</b></p>"));
    no_problems(&p);
}

#[test]
fn xpath_axes_unions_and_the_rest_of_the_core_library() {
    let p = page(
        "<div id='a'><h2>Two</h2><p class='x'>p1</p><h1>One</h1><p>p2 <i>it</i></p></div>\
         <div id='b' lang='en-GB'><span>5</span><span>7</span><span>x</span></div>",
    );
    let all = |expr: &str| p.xpath(expr).getall();
    // A union comes back in document order, whatever the order of its operands.
    assert_eq!(all("//h1/text() | //h2/text()"), ["Two", "One"]);
    assert_eq!(all("//*[self::h1 or self::h2]/text()"), ["Two", "One"]);
    assert_eq!(all("//h1/preceding-sibling::*[1]/text()"), ["p1"]);
    assert_eq!(all("//h1/following::text()[1]"), ["p2 "]);
    assert_eq!(all("count(//i/preceding::*)"), ["4.0"]);
    assert_eq!(
        all("count(//i/ancestor-or-self::*)"),
        ["5.0"],
        "html, body, div, p, i"
    );
    assert_eq!(all("local-name(//*[@lang])"), ["div"]);
    assert_eq!(all("count(//span[lang('en')])"), ["3.0"]);
    assert_eq!(
        all("sum(//span[number(.) = number(.)])"),
        ["12.0"],
        "NaN is not itself"
    );
    assert_eq!(all("translate(//h2, 'wo', 'WO')"), ["TWO"]);
    assert_eq!(all("substring(//h1, 2)"), ["ne"]);
    assert_eq!(all("string-length(//h1)"), ["3.0"]);
    assert_eq!(all("floor(7 div 2) + ceiling(0.5) + round(2.5)"), ["7.0"]);
    assert_eq!(all("not(//table)"), ["1"]);
    assert_eq!(all("boolean(//p[@class])"), ["1"]);
    assert_eq!(all("//div[@id='b']/span[last() - 1]/text()"), ["7"]);
    assert_eq!(all("//p[not(@class)]/@class"), Vec::<String>::new());
    assert_eq!(all("name(//p[2]/..)"), ["div"]);
    // A position counts among each parent's children; in parentheses, in the whole list.
    assert_eq!(all("//div/*[1]/text()"), ["Two", "5"]);
    assert_eq!(all("(//div/*)[1]/text()"), ["Two"]);
    assert_eq!(all("(//span)[last()]/text()"), ["x"]);
    no_problems(&p);
}
