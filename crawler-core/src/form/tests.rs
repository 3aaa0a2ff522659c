use super::*;
use bytes::Bytes;

/// A page at http://example.com/dir/page.html, reached at depth 1.
fn page(html: &str) -> Response {
    let mut req = Request::get("http://example.com/dir/page.html").unwrap();
    req.depth = 1;
    let url = req.url.clone();
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", http::HeaderValue::from_static("text/html"));
    Response::new(req, url, 200, headers, Bytes::from(html.to_owned()))
}

/// The submitted pairs: the body of a POST, the query of a GET.
fn pairs(req: &Request) -> Vec<(String, String)> {
    let encoded: &[u8] = match &req.body {
        Some(body) => body,
        None => req.url.query().unwrap_or("").as_bytes(),
    };
    form_urlencoded::parse(encoded).into_owned().collect()
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

const LOGIN: &str = r#"<html><body>
<form id="login" action="/login?next=%2F" method="POST">
  <input type="hidden" name="csrf_token" value="a+b/c=">
  <label>Username <input type="text" name="username"></label>
  <label>Password <input type="password" name="password"></label>
  <button type="submit">Sign in</button>
</form></body></html>"#;

#[test]
fn a_login_form_posts_its_csrf_token_and_the_credentials() {
    let p = page(LOGIN);
    let req = FormRequest::from_response(&p)
        .field("username", "ada lovelace")
        .field("password", "p&ss=1")
        .build()
        .unwrap();
    assert_eq!(req.method, "POST");
    assert_eq!(req.url.as_str(), "http://example.com/login?next=%2F");
    assert_eq!(
        req.header_value("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    // The nameless button sends nothing; the values are encoded.
    assert_eq!(
        req.body.as_deref(),
        Some(&b"csrf_token=a%2Bb%2Fc%3D&username=ada+lovelace&password=p%26ss%3D1"[..])
    );
    assert_eq!((req.depth, req.callback.as_deref()), (2, None));
}

#[test]
fn controls_are_collected_as_a_browser_does() {
    let html = r#"<form action="save" method="post">
      <input name="plain" value="1">
      <input name="novalue">
      <input type="checkbox" name="cb" value="a" checked>
      <input type="checkbox" name="cb" value="b">
      <input type="checkbox" name="cb_default" checked>
      <input type="radio" name="r" value="x">
      <input type="radio" name="r" value="y" checked>
      <select name="one"><option value="1">One</option><option selected>  Two
        too </option></select>
      <select name="first"><option disabled>Zero</option><option value="f1">F</option></select>
      <select name="many" multiple><option value="m1" selected>a</option>
        <optgroup disabled><option value="m2" selected>b</option></optgroup>
        <option value="m3" selected>c</option></select>
      <select name="box" size="3"><option value="b1">no default in a list box</option></select>
      <textarea name="note">line 1
  a &amp; b &lt;i&gt;</textarea>
      <input name="off" value="x" disabled>
      <fieldset disabled><input name="in_disabled_set" value="x"></fieldset>
      <datalist><option value="d"></option><input name="in_datalist" value="x"></datalist>
      <input type="reset" name="reset" value="x">
      <input type="button" name="button" value="x">
      <button type="button" name="plain_button" value="x">no</button>
      <input name="" value="nameless">
      <input type="file" name="upload">
    </form>"#;
    let p = page(html);
    let req = FormRequest::from_response(&p).build().unwrap();
    assert_eq!(req.url.as_str(), "http://example.com/dir/save");
    assert_eq!(
        pairs(&req),
        owned(&[
            ("plain", "1"),
            ("novalue", ""),
            ("cb", "a"),
            ("cb_default", "on"),
            ("r", "y"),
            ("one", "Two too"),
            ("first", "f1"),
            ("many", "m1"),
            ("many", "m3"),
            ("note", "line 1\r\n  a & b <i>"),
            ("upload", ""),
        ])
    );
}

#[test]
fn a_get_form_sends_its_fields_as_the_query_string() {
    // An empty action is the page's URL, not the <base>; the page's query is replaced.
    let html = r#"<head><base href="http://other.example/"></head>
      <form action="" method="get"><input name="q" value="rust crawler"><input type="submit" name="go" value="Search"></form>"#;
    let mut req = Request::get("http://example.com/search?q=old&page=2").unwrap();
    req.depth = 0;
    let url = req.url.clone();
    let p = Response::new(req, url, 200, http::HeaderMap::new(), Bytes::from(html));
    let req = FormRequest::from_response(&p).build().unwrap();
    assert_eq!(req.method, "GET");
    assert_eq!(req.body, None);
    assert_eq!(req.header_value("content-type"), None);
    assert_eq!(
        req.url.as_str(),
        "http://example.com/search?q=rust+crawler&go=Search"
    );
    // Without a method attribute, and with an unknown one, a form is a GET too.
    for form in [
        r#"<form action="/s"><input name="a" value="1"></form>"#,
        r#"<form action="/s" method="PUT"><input name="a" value="1"></form>"#,
    ] {
        let p = page(form);
        let req = FormRequest::from_response(&p).build().unwrap();
        assert_eq!(
            (req.method.as_str(), req.url.as_str()),
            ("GET", "http://example.com/s?a=1")
        );
    }
}

const TWO_FORMS: &str = r#"
  <form id="search" action="/search"><input name="q" value="s"></form>
  <div class="box news"></div>
  <form name="subscribe" class="news" action="/subscribe" method="post"><input name="email" value="e"></form>"#;

#[test]
fn a_form_is_picked_by_id_name_css_xpath_or_number() {
    let p = page(TWO_FORMS);
    let action = |form: FormRequest<'_>| form.build().unwrap().url.path().to_owned();
    assert_eq!(action(FormRequest::from_response(&p)), "/search");
    assert_eq!(
        action(FormRequest::from_response(&p).form_id("search")),
        "/search"
    );
    assert_eq!(
        action(FormRequest::from_response(&p).form_name("subscribe")),
        "/subscribe"
    );
    assert_eq!(
        action(FormRequest::from_response(&p).form_css("form.news")),
        "/subscribe"
    );
    // The first match that is a form, past a <div> of the same class.
    assert_eq!(
        action(FormRequest::from_response(&p).form_css(".news")),
        "/subscribe"
    );
    assert_eq!(
        action(FormRequest::from_response(&p).form_number(1)),
        "/subscribe"
    );
    // By XPath: the form itself, or the one around a field.
    assert_eq!(
        action(FormRequest::from_response(&p).form_xpath("//form[@method='post']")),
        "/subscribe"
    );
    assert_eq!(
        action(FormRequest::from_response(&p).form_xpath("//input[@name='email']")),
        "/subscribe"
    );
    assert!(
        FormRequest::from_response(&p)
            .form_xpath("//div")
            .build()
            .is_err(),
        "a <div> outside any form picks none"
    );
    // The last choice wins.
    assert_eq!(
        action(
            FormRequest::from_response(&p)
                .form_number(1)
                .form_id("search")
        ),
        "/search"
    );
}

#[test]
fn a_missing_form_is_an_error_in_our_words() {
    let p = page(TWO_FORMS);
    let e = FormRequest::from_response(&p)
        .form_id("login")
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Missing);
    assert_eq!(
        e.to_string(),
        "no form with id 'login' on http://example.com/dir/page.html; \
         its forms: 0 (id 'search'), 1 (name 'subscribe')"
    );
    let e = FormRequest::from_response(&p)
        .form_number(2)
        .build()
        .unwrap_err();
    assert!(
        e.to_string().starts_with("no form number 2 (from 0) on "),
        "{e}"
    );
    let e = FormRequest::from_response(&p)
        .form_name("x")
        .build()
        .unwrap_err();
    assert!(e.to_string().starts_with("no form named 'x' on "), "{e}");
    let e = FormRequest::from_response(&p)
        .form_css("div.box")
        .build()
        .unwrap_err();
    assert!(
        e.to_string().contains("matches a <div>, not a <form>"),
        "{e}"
    );
    let e = FormRequest::from_response(&p)
        .form_css("form[")
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Selector);

    let p = page("<p>No forms here</p>");
    let e = FormRequest::from_response(&p).build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Missing);
    assert_eq!(
        e.to_string(),
        "no <form> on http://example.com/dir/page.html"
    );
}

const BUTTONS: &str = r#"<form action="/edit" method="post">
  <input name="text" value="t">
  <button name="op" value="disabled" disabled>Off</button>
  <button name="op" value="save">Save</button>
  <input type="submit" name="op" value="preview" formaction="/preview" formmethod="get">
  <input type="image" name="map" src="m.png">
  <button name="delete" value="yes" formaction="/delete">Delete</button>
</form>"#;

#[test]
fn the_first_enabled_submit_button_is_clicked_unless_told_otherwise() {
    let p = page(BUTTONS);
    let req = FormRequest::from_response(&p).build().unwrap();
    assert_eq!((req.method.as_str(), req.url.path()), ("POST", "/edit"));
    assert_eq!(pairs(&req), owned(&[("text", "t"), ("op", "save")]));

    // The clicked button's formaction and formmethod apply.
    let req = FormRequest::from_response(&p).click_nth(1).build().unwrap();
    assert_eq!(req.method, "GET");
    assert_eq!(
        req.url.as_str(),
        "http://example.com/preview?text=t&op=preview"
    );

    let req = FormRequest::from_response(&p)
        .click("delete")
        .build()
        .unwrap();
    assert_eq!(req.url.path(), "/delete");
    assert_eq!(pairs(&req), owned(&[("text", "t"), ("delete", "yes")]));

    // An image button sends where it was clicked.
    let req = FormRequest::from_response(&p).click("map").build().unwrap();
    assert_eq!(
        pairs(&req),
        owned(&[("text", "t"), ("map.x", "0"), ("map.y", "0")])
    );

    let req = FormRequest::from_response(&p).dont_click().build().unwrap();
    assert_eq!(pairs(&req), owned(&[("text", "t")]));

    let e = FormRequest::from_response(&p)
        .click("nope")
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Missing);
    assert!(
        e.to_string().contains("no submit button named 'nope'"),
        "{e}"
    );
    let e = FormRequest::from_response(&p)
        .click_nth(4)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("number 4 (from 0) of 4"), "{e}");
}

#[test]
fn fields_replace_the_pages_values_in_place_or_are_added() {
    let html = r#"<form method="post"><input name="a" value="1"><input type="checkbox" name="t" value="x" checked><input type="checkbox" name="t" value="y" checked><input name="z" value="9"></form>"#;
    let p = page(html);
    let req = FormRequest::from_response(&p)
        .field("t", "first")
        .field("t", "replaced")
        .fields([("new", "n"), ("a", "2")])
        .field_values("many", ["m1", "m2"])
        .build()
        .unwrap();
    // No action: the page's URL.
    assert_eq!(req.url.as_str(), "http://example.com/dir/page.html");
    assert_eq!(
        pairs(&req),
        owned(&[
            ("a", "2"),
            ("t", "replaced"),
            ("z", "9"),
            ("new", "n"),
            ("many", "m1"),
            ("many", "m2"),
        ])
    );
    // No values leaves a field out.
    let req = FormRequest::from_response(&p)
        .field_values("t", Vec::<String>::new())
        .build()
        .unwrap();
    assert_eq!(pairs(&req), owned(&[("a", "1"), ("z", "9")]));
}
