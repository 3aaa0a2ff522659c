//! The JSON API, the login flow and its session cookie, and the extra headers the recorder
//! keeps (Referer, Cookie, Authorization, X-Crawl-Tag).

use crate::common;

use common::{client, hrefs};
use crawler_lab::{ACCOUNT_BOOKS, Lab, PASSWORD, Scenario, USERNAME};

async fn lab() -> Lab {
    Lab::builder()
        .books(100)
        .seed(7)
        .start()
        .await
        .expect("lab starts")
}

fn set_cookie(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect()
}

/// `name=value` of a Set-Cookie line.
fn pair(line: &str) -> String {
    line.split(';').next().unwrap_or("").trim().to_owned()
}

fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf_token\" value=\"")
        .expect("hidden input")
        + 25;
    html[at..].split('"').next().expect("value").to_owned()
}

#[tokio::test]
async fn the_api_pages_through_every_book_as_json() {
    let lab = lab().await;
    let c = client();
    let mut next = Some("/api/books".to_owned());
    let mut ids = Vec::new();
    let mut pages = 0;
    while let Some(path) = next {
        let resp = c.get(lab.url_for(&path)).send().await.expect("get");
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let v: serde_json::Value =
            serde_json::from_str(&resp.text().await.expect("body")).expect("json");
        pages += 1;
        assert_eq!(v["pages"], 5);
        assert_eq!(v["total"], 100);
        for b in v["books"].as_array().expect("books") {
            let id = b["id"].as_u64().expect("id") as u32;
            let book = lab.book(id).expect("known book");
            assert_eq!(b["title"], book.title.as_str());
            assert_eq!(b["price"], book.price.as_str());
            assert_eq!(b["url"], book.path.as_str());
            ids.push(id);
        }
        next = v["next"].as_str().map(str::to_owned);
    }
    assert_eq!(pages, 5);
    assert_eq!(ids, (1..=100).collect::<Vec<_>>());
    for bad in [
        "/api/books?page=0",
        "/api/books?page=6",
        "/api/books?page=x",
    ] {
        let resp = c.get(lab.url_for(bad)).send().await.expect("get");
        assert_eq!(resp.status(), 404, "{bad}");
        let v: serde_json::Value =
            serde_json::from_str(&resp.text().await.expect("body")).expect("json error");
        assert!(v["error"].as_str().is_some_and(|e| e.contains("1 to 5")));
    }
    lab.shutdown().await;
}

#[tokio::test]
async fn the_api_carries_the_scenarios_ratelimit_headers() {
    let lab = Lab::builder()
        .books(100)
        .scenario(Scenario::by_name("ratelimit-headers").expect("named scenario"))
        .start()
        .await
        .expect("lab starts");
    let resp = client()
        .get(lab.url_for("/api/books?page=2"))
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["ratelimit-limit"], "50");
    assert_eq!(resp.headers()["ratelimit-remaining"], "49");
    lab.shutdown().await;
}

#[tokio::test]
async fn login_sets_a_session_that_opens_the_account() {
    let lab = lab().await;
    let c = client();

    // Without a session the account sends you to the login page.
    let resp = c.get(lab.url_for("/account")).send().await.expect("get");
    assert_eq!(resp.status(), 302);
    assert_eq!(resp.headers()["location"], "/login");

    let resp = c.get(lab.url_for("/login")).send().await.expect("get");
    assert_eq!(resp.status(), 200);
    let cookies = set_cookie(&resp);
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    assert!(cookies[0].contains("Path=/login") && cookies[0].contains("HttpOnly"));
    let csrf_cookie = pair(&cookies[0]);
    let html = resp.text().await.expect("body");
    let csrf = csrf_of(&html);
    assert_eq!(csrf_cookie, format!("csrftoken={csrf}"));
    assert!(html.contains("name=\"username\"") && html.contains("name=\"password\""));

    let post = |body: String, cookie: Option<String>| {
        let mut b = c
            .post(lab.url_for("/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(cookie) = cookie {
            b = b.header("cookie", cookie);
        }
        b.send()
    };
    let good = format!("csrf_token={csrf}&username={USERNAME}&password={PASSWORD}");
    // The token must come back in the form and in the cookie.
    let resp = post(good.clone(), None).await.expect("post");
    assert_eq!(resp.status(), 403);
    let resp = post(
        format!("csrf_token=nope&username={USERNAME}&password={PASSWORD}"),
        Some(csrf_cookie.clone()),
    )
    .await
    .expect("post");
    assert_eq!(resp.status(), 403);
    let resp = post(
        format!("csrf_token={csrf}&username={USERNAME}&password=wrong"),
        Some(csrf_cookie.clone()),
    )
    .await
    .expect("post");
    assert_eq!(resp.status(), 401);
    assert!(set_cookie(&resp).is_empty());
    assert!(
        resp.text()
            .await
            .expect("body")
            .contains("Invalid username")
    );

    let resp = post(good, Some(csrf_cookie)).await.expect("post");
    assert_eq!(resp.status(), 303);
    let location = resp.headers()["location"]
        .to_str()
        .expect("text")
        .to_owned();
    assert!(location.starts_with("/account?ticket="), "{location}");
    let cookies = set_cookie(&resp);
    assert_eq!(cookies.len(), 1);
    assert!(cookies[0].contains("Path=/") && cookies[0].contains("HttpOnly"));
    let session = pair(&cookies[0]);
    assert!(session.starts_with("session="));

    let resp = c
        .get(lab.url_for("/account"))
        .header("cookie", &session)
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    let html = resp.text().await.expect("body");
    assert!(html.contains(&format!("Signed in as <span class=\"username\">{USERNAME}")));
    let links: Vec<String> = hrefs(&html)
        .into_iter()
        .filter(|h| h.starts_with("/account/books/"))
        .collect();
    assert_eq!(links.len(), ACCOUNT_BOOKS as usize);
    let expected: Vec<String> = lab
        .account_books()
        .iter()
        .map(|id| format!("/account/books/{id}.html"))
        .collect();
    assert_eq!(links, expected);

    // The books need the session too.
    let id = lab.account_books()[0];
    let resp = c.get(lab.url_for(&links[0])).send().await.expect("get");
    assert_eq!(resp.status(), 302);
    let resp = c
        .get(lab.url_for(&links[0]))
        .header("cookie", format!("theme=dark; {session}"))
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    let title = lab.book(id).expect("book").title;
    assert!(resp.text().await.expect("body").contains(&title));
    let resp = c
        .get(lab.url_for("/account"))
        .header("cookie", "session=forged")
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 302);

    // The login's ticket opens the account once more and hands over the session cookie,
    // for clients that followed the redirect before seeing its Set-Cookie.
    let resp = c.get(lab.url_for(&location)).send().await.expect("get");
    assert_eq!(resp.status(), 200);
    assert_eq!(
        set_cookie(&resp)
            .iter()
            .map(|l| pair(l))
            .collect::<Vec<_>>(),
        std::slice::from_ref(&session)
    );

    let recorded = lab.recorder().requests();
    let posts: Vec<_> = recorded.iter().filter(|r| r.method == "POST").collect();
    assert_eq!(posts.len(), 4);
    assert_eq!(posts[3].status, 303);
    assert!(
        recorded
            .iter()
            .any(|r| r.cookie.as_deref() == Some(session.as_str()))
    );
    lab.shutdown().await;
}

#[tokio::test]
async fn the_recorder_keeps_referer_cookie_authorization_and_tag() {
    let lab = lab().await;
    let resp = client()
        .get(lab.url_for("/catalogue/page-1.html"))
        .header("referer", "http://example.com/from")
        .header("cookie", "a=1")
        .header("authorization", "Basic cmVhZGVyOmJvb2tz")
        .header("x-crawl-tag", "mw-test")
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    client()
        .get(lab.url_for("/catalogue/page-2.html"))
        .send()
        .await
        .expect("get");
    let r = lab.recorder().requests();
    assert_eq!(r[0].referer.as_deref(), Some("http://example.com/from"));
    assert_eq!(r[0].cookie.as_deref(), Some("a=1"));
    assert_eq!(
        r[0].authorization.as_deref(),
        Some("Basic cmVhZGVyOmJvb2tz")
    );
    assert_eq!(r[0].tag.as_deref(), Some("mw-test"));
    assert_eq!(
        (
            r[1].referer.as_deref(),
            r[1].cookie.as_deref(),
            r[1].tag.as_deref()
        ),
        (None, None, None)
    );
    lab.shutdown().await;
}
