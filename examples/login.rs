//! login: cookies and a form POST.
//!
//! Signs in to the lab's members' area and scrapes the books on the account page:
//!
//! 1. `GET /login`: the form carries a hidden CSRF token, and the server sets a `csrftoken`
//!    cookie (Path=/login) that the cookies middleware keeps.
//! 2. `POST /login` with `application/x-www-form-urlencoded` credentials and the token; the
//!    cookies middleware sends the `csrftoken` cookie back, which the server checks.
//! 3. The server answers `303 See Other` to `/account` with a `session` cookie (Path=/,
//!    HttpOnly); the account page lists "your books", and each of those pages needs the
//!    session cookie, which the cookie jar sends with every request after the login.
//!
//! Cookies are on by default (`cookies_enabled = true`), one jar per spider. The HTTP
//! client follows redirects itself, so a cookie set on the 303 is not seen by the jar; the
//! lab's account page hands the session out again (from the `ticket` in the redirect), as
//! many single-sign-on flows do.
//!
//! ```text
//! cargo run --release --example login
//! ```
//!
//! Items go to `login.jsonl`; the final stats are printed.

use crawler::prelude::*;

/// A book on the user's account page.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct Book {
    /// The page the book was read from.
    pub url: String,
    /// Its title.
    pub title: String,
    /// Its price as shown, e.g. "£51.77".
    pub price: String,
    /// Who was signed in when it was scraped.
    pub account: String,
}

/// Signs in at `base` + `/login` and scrapes the account's books.
pub(crate) struct Login {
    /// The site's root URL, with a trailing slash.
    pub base: String,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

/// Form-encodes one value (`application/x-www-form-urlencoded`).
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Spider for Login {
    type Item = Book;

    fn name(&self) -> &str {
        "login"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![format!("{}login", self.base)]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        match page.callback() {
            // The login form: send it back with our credentials.
            None => {
                let token = page
                    .select("form#login input[name=csrf_token]")
                    .attr("value")
                    .context("no CSRF token on the login form")?;
                let body = format!(
                    "csrf_token={}&username={}&password={}",
                    form_encode(&token),
                    form_encode(&self.username),
                    form_encode(&self.password)
                );
                let action = page.urljoin("/login")?;
                out.request(
                    Request::new(action)
                        .method("POST")
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(body)
                        .callback("account"),
                );
            }
            // Where the login's redirect lands: the account page, if the login worked.
            Some("account") => {
                let Some(user) = page.select_first("span.username").map(|e| e.text()) else {
                    return Err(crawler::Error::msg(format!(
                        "login failed: landed on {} without an account",
                        page.url()
                    )));
                };
                for href in page.select("ul.your-books a").attrs("href") {
                    out.follow(href).callback("book").meta("account", &user)?;
                }
            }
            Some(_) => out.item(Book {
                url: page.url().to_string(),
                title: page.text_of("div.product h1")?,
                price: page.text_of("div.product p.price")?,
                account: page.meta("account").unwrap_or_default(),
            }),
        }
        Ok(())
    }
}

#[allow(dead_code)] // tests include this file as a module and use only the spider
#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let lab = crawler_lab::Lab::builder().books(1000).start().await?;
    println!("lab site at {}", lab.url());
    let spider = Login {
        base: lab.url(),
        username: crawler_lab::USERNAME.into(),
        password: crawler_lab::PASSWORD.into(),
    };
    let stats = Crawl::new(spider)
        .feed("login.jsonl")?
        // Our own loopback server: no need to pace it.
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .run()
        .await?;
    println!("{stats}");
    println!("items written to login.jsonl");
    lab.shutdown().await;
    Ok(())
}
