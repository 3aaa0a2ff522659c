//! login: cookies and a form POST.
//!
//! Signs in to the lab's members' area and scrapes the books on the account page:
//!
//! 1. `GET /login`: the form carries a hidden CSRF token, and the server sets a `csrftoken`
//!    cookie (Path=/login) that the cookies middleware keeps.
//! 2. `POST /login`: the form submitted with [`FormRequest::from_response`] (Scrapy's
//!    `FormRequest.from_response`), our credentials filled in and the hidden token sent
//!    along; the cookies middleware sends the `csrftoken` cookie back, which the server
//!    checks.
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
            // The login form: submit it as a browser would, with our credentials. Its
            // hidden CSRF token goes along; the action, method and encoding come from the
            // form.
            None => {
                let login = FormRequest::from_response(&page)
                    .form_id("login")
                    .field("username", &self.username)
                    .field("password", &self.password)
                    .build()?;
                out.request(login.callback("account"));
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
