//! Forms: the request a browser sends when a page's form is submitted, like Scrapy's
//! `FormRequest.from_response`.
//!
//! Built on the public selection API only ([`Response::select`], [`Node`]), so it reads
//! the page the way a spider would.

use url::form_urlencoded;

use crate::error::{Error, ErrorKind, Result};
use crate::request::Request;
use crate::response::Response;
use crate::select::Node;

/// The controls of a form, in document order. Descendants of a disabled `<fieldset>` are
/// disabled (the spec's exception for its first `<legend>` is not made), and a `<datalist>`'s
/// contents are never submitted.
const CONTROLS: &str = "input:not(fieldset[disabled] *):not(datalist *), \
     button:not(fieldset[disabled] *):not(datalist *), \
     select:not(fieldset[disabled] *):not(datalist *), \
     textarea:not(fieldset[disabled] *):not(datalist *)";

/// The request that submitting a form of a page sends, as a browser builds it (Scrapy's
/// `FormRequest.from_response`).
///
/// The form is the page's first unless [`form_id`](Self::form_id),
/// [`form_name`](Self::form_name), [`form_css`](Self::form_css) or
/// [`form_number`](Self::form_number) picks another (the last of these called wins). Its
/// successful controls are collected as a browser does: named `<input>`s (hidden ones
/// too) with their `value`, checkboxes and radio buttons only when `checked`, a `<select>`'s
/// selected options (or its first option when none is selected), a `<textarea>`'s text;
/// disabled controls are left out. The first submit button is clicked (its name and value
/// are sent, and its `formaction` / `formmethod` apply), unless [`click`](Self::click) or
/// [`click_nth`](Self::click_nth) picks another or [`dont_click`](Self::dont_click) clicks
/// none. [`field`](Self::field) sets a value in place of the page's or adds one.
///
/// A `GET` form sends its fields as the action's query string; a `POST` form as an
/// `application/x-www-form-urlencoded` body (whatever its `enctype`, as Scrapy does), UTF-8
/// encoded. The action is resolved against the page (an empty or missing one is the page's
/// URL). The request has the default callback and the next depth, like a followed link.
///
/// ```
/// # use crawler_core::{Bytes, FormRequest, HeaderMap, HeaderValue, Request, Response, Result};
/// # fn f() -> Result<()> {
/// # let req = Request::get("http://example.com/login")?;
/// # let mut headers = HeaderMap::new();
/// # headers.insert("content-type", HeaderValue::from_static("text/html"));
/// # let html = r#"<form action="/login" method="post">
/// #   <input type="hidden" name="csrf" value="t0k">
/// #   <input name="user"> <input type="password" name="pass">
/// #   <button>Sign in</button></form>"#;
/// # let page = Response::new(req.clone(), req.url, 200, headers, Bytes::from(html));
/// let login = FormRequest::from_response(&page)
///     .field("user", "ada")
///     .field("pass", "s3cret")
///     .build()?
///     .callback("account");
/// assert_eq!(login.method, "POST");
/// assert_eq!(login.body.as_deref(), Some(&b"csrf=t0k&user=ada&pass=s3cret"[..]));
/// # Ok(()) }
/// # f().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct FormRequest<'a> {
    page: &'a Response,
    form: Which,
    click: Click,
    /// Values the spider sets, each name with all its values, in the order first set.
    fields: Vec<(String, Vec<String>)>,
}

/// Which form of the page.
#[derive(Debug, Clone)]
enum Which {
    First,
    Css(String),
    XPath(String),
    Id(String),
    Name(String),
    Number(usize),
}

/// Which submit button is clicked.
#[derive(Debug, Clone)]
enum Click {
    First,
    Named(String),
    Nth(usize),
    None,
}

/// What the clicked button changes about the submission.
#[derive(Default)]
struct Submitter {
    action: Option<String>,
    method: Option<String>,
}

impl<'a> FormRequest<'a> {
    /// Submit a form of `page` (the first, unless another is picked).
    pub fn from_response(page: &'a Response) -> Self {
        Self {
            page,
            form: Which::First,
            click: Click::First,
            fields: Vec::new(),
        }
    }

    /// The form with this `id` (Scrapy's `formid`).
    pub fn form_id(mut self, id: impl Into<String>) -> Self {
        self.form = Which::Id(id.into());
        self
    }

    /// The form with this `name` attribute (Scrapy's `formname`).
    pub fn form_name(mut self, name: impl Into<String>) -> Self {
        self.form = Which::Name(name.into());
        self
    }

    /// The first `<form>` this CSS selector matches (Scrapy's `formcss`; the selector must
    /// match the form itself, e.g. `form.search`, not an element inside it).
    pub fn form_css(mut self, css: impl Into<String>) -> Self {
        self.form = Which::Css(css.into());
        self
    }

    /// The form an XPath selects, or the form around the first node it selects (Scrapy's
    /// `formxpath`: `//input[@name="q"]` picks the form holding that field).
    pub fn form_xpath(mut self, expr: impl Into<String>) -> Self {
        self.form = Which::XPath(expr.into());
        self
    }

    /// The page's form at this index, from 0 (Scrapy's `formnumber`).
    pub fn form_number(mut self, index: usize) -> Self {
        self.form = Which::Number(index);
        self
    }

    /// Send `value` for `name`: in place of the page's value(s) for that name, or added
    /// when the form has no such field (Scrapy's `formdata`). Setting a name again replaces
    /// the value set before.
    pub fn field(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.field_values(name, [value])
    }

    /// Send several values for `name` (a multiple `<select>`, checkboxes sharing a name),
    /// in place of the page's; no values leaves the field out of the submission.
    pub fn field_values<V: Into<String>>(
        mut self,
        name: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        let name = name.into();
        let values = values.into_iter().map(Into::into).collect();
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some((_, old)) => *old = values,
            None => self.fields.push((name, values)),
        }
        self
    }

    /// [`field`](Self::field) for each pair.
    pub fn fields<N: Into<String>, V: Into<String>>(
        self,
        pairs: impl IntoIterator<Item = (N, V)>,
    ) -> Self {
        pairs
            .into_iter()
            .fold(self, |form, (name, value)| form.field(name, value))
    }

    /// Click the form's first submit button named `name` (Scrapy's
    /// `clickdata={"name": ...}`); [`build`](Self::build) fails if there is none.
    pub fn click(mut self, name: impl Into<String>) -> Self {
        self.click = Click::Named(name.into());
        self
    }

    /// Click the form's submit button at this index, from 0 (Scrapy's `clickdata={"nr": n}`);
    /// [`build`](Self::build) fails if there is none.
    pub fn click_nth(mut self, index: usize) -> Self {
        self.click = Click::Nth(index);
        self
    }

    /// Click no button (Scrapy's `dont_click=True`): no button's name and value are sent,
    /// as when a form is submitted by pressing Enter in a form without a submit button.
    pub fn dont_click(mut self) -> Self {
        self.click = Click::None;
        self
    }

    /// The request submitting the form sends.
    ///
    /// Fails with [`ErrorKind::Missing`] when the page has no form, the chosen form is not
    /// there, or the chosen button is not in it; with [`ErrorKind::Selector`] for an invalid
    /// [`form_css`](Self::form_css); with [`ErrorKind::Url`] for an action that is not an
    /// http(s) URL.
    pub fn build(self) -> Result<Request> {
        let form = self.pick_form()?;
        let (mut entries, submitter) = self.entries(&form)?;
        self.apply_fields(&mut entries);

        let action = submitter
            .action
            .or_else(|| form.attr("action"))
            .filter(|a| !a.trim().is_empty());
        let mut request = match action {
            Some(href) => self.page.follow(&href)?,
            // No action, or an empty one: the page's own URL (not its `<base>`).
            None => self.page.follow(self.page.url().as_str())?,
        };
        let method = submitter.method.or_else(|| form.attr("method"));
        let encoded = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                entries
                    .iter()
                    .map(|(n, v)| (normalize_newlines(n), normalize_newlines(v))),
            )
            .finish();
        // Only `post` posts: `get`, a missing or an unknown method is a GET, as in browsers.
        if method.is_some_and(|m| m.trim().eq_ignore_ascii_case("post")) {
            request = request
                .method("POST")
                .header("content-type", "application/x-www-form-urlencoded")
                .body(encoded);
        } else {
            // The fields replace the action's query string, as a browser does.
            request
                .url
                .set_query((!encoded.is_empty()).then_some(encoded.as_str()));
        }
        Ok(request)
    }

    fn pick_form(&self) -> Result<Node<'a>> {
        let page = self.page;
        let forms = page.select("form");
        if forms.is_empty() {
            return Err(Error::new(
                ErrorKind::Missing,
                format!("no <form> on {}", page.url()),
            ));
        }
        let (found, wanted) = match &self.form {
            Which::First => (forms.first(), String::new()),
            Which::Id(id) => (
                forms.iter().find(|f| f.attr("id").as_deref() == Some(id)),
                format!("with id '{id}'"),
            ),
            Which::Name(name) => (
                forms
                    .iter()
                    .find(|f| f.attr("name").as_deref() == Some(name)),
                format!("named '{name}'"),
            ),
            Which::Number(n) => (forms.iter().nth(*n), format!("number {n} (from 0)")),
            Which::Css(css) => {
                let matched = page.try_select(css)?;
                let form = matched.iter().find(|e| e.name() == "form");
                if form.is_none()
                    && let Some(e) = matched.first()
                {
                    return Err(Error::new(
                        ErrorKind::Missing,
                        format!(
                            "form selector '{css}' matches a <{}>, not a <form>, on {}",
                            e.name(),
                            page.url()
                        ),
                    ));
                }
                (form, format!("matching '{css}'"))
            }
            Which::XPath(expr) => {
                let matched = page.try_xpath(expr)?;
                let form = matched
                    .iter()
                    .find_map(|n| n.xpath("ancestor-or-self::form").first());
                (form, format!("at or around what '{expr}' selects"))
            }
        };
        found.ok_or_else(|| {
            let known: Vec<String> = forms.iter().enumerate().map(describe).collect();
            Error::new(
                ErrorKind::Missing,
                format!(
                    "no form {wanted} on {}; its forms: {}",
                    page.url(),
                    known.join(", ")
                ),
            )
        })
    }

    /// The form's successful controls as (name, value) pairs in document order, the clicked
    /// button's included, and what that button changes.
    fn entries(&self, form: &Node<'_>) -> Result<(Vec<(String, String)>, Submitter)> {
        let mut entries = Vec::new();
        let mut submitter = None;
        let mut buttons = 0;
        for control in form.try_select(CONTROLS)?.iter() {
            if control.attr("disabled").is_some() {
                continue;
            }
            let tag = control.name();
            let kind = control
                .attr("type")
                .map(|t| t.trim().to_ascii_lowercase())
                .unwrap_or_default();
            let name = control.attr("name").unwrap_or_default();
            let value = || control.attr("value").unwrap_or_default();
            let is_button = match tag.as_str() {
                "input" => matches!(kind.as_str(), "submit" | "image"),
                // A button's missing or unknown type is `submit`.
                "button" => !matches!(kind.as_str(), "reset" | "button"),
                _ => false,
            };
            if is_button {
                let clicked = match &self.click {
                    Click::First => submitter.is_none(),
                    Click::Named(wanted) => submitter.is_none() && name == *wanted,
                    Click::Nth(n) => buttons == *n,
                    Click::None => false,
                };
                buttons += 1;
                if clicked {
                    if kind == "image" {
                        // The click's coordinates: we click the top-left corner.
                        let prefix = if name.is_empty() {
                            String::new()
                        } else {
                            format!("{name}.")
                        };
                        entries.push((format!("{prefix}x"), "0".to_owned()));
                        entries.push((format!("{prefix}y"), "0".to_owned()));
                    } else if !name.is_empty() {
                        entries.push((name.clone(), value()));
                    }
                    submitter = Some(Submitter {
                        action: control.attr("formaction"),
                        method: control.attr("formmethod"),
                    });
                }
                continue;
            }
            if name.is_empty() {
                continue;
            }
            match (tag.as_str(), kind.as_str()) {
                ("input", "checkbox" | "radio") if control.attr("checked").is_some() => {
                    let v = control.attr("value").unwrap_or_else(|| "on".to_owned());
                    entries.push((name, v));
                }
                // Unchecked boxes, and buttons that do not submit, send nothing.
                ("input", "checkbox" | "radio" | "reset" | "button") | ("button", _) => {}
                // A file input sends its file's name, and no file is chosen.
                ("input", "file") => entries.push((name, String::new())),
                ("input", "hidden")
                    if name.eq_ignore_ascii_case("_charset_")
                        && control.attr("value").is_none() =>
                {
                    entries.push((name, "UTF-8".to_owned()));
                }
                ("input", _) => entries.push((name, value())),
                ("select", _) => {
                    for v in selected_options(&control)? {
                        entries.push((name.clone(), v));
                    }
                }
                ("textarea", _) => entries.push((name, textarea_value(&control))),
                _ => {}
            }
        }
        let named = match &self.click {
            Click::Named(name) => Some(format!("named '{name}'")),
            Click::Nth(n) => Some(format!("number {n} (from 0) of {buttons}")),
            Click::First | Click::None => None,
        };
        if let (None, Some(named)) = (&submitter, named) {
            return Err(Error::new(
                ErrorKind::Missing,
                format!(
                    "no submit button {named} in the form on {}",
                    self.page.url()
                ),
            ));
        }
        Ok((entries, submitter.unwrap_or_default()))
    }

    /// The spider's values in place of the page's: at the first entry of each name (its
    /// other entries dropped), or at the end for a name the form does not have.
    fn apply_fields(&self, entries: &mut Vec<(String, String)>) {
        for (name, values) in &self.fields {
            let at = entries.iter().position(|(n, _)| n == name);
            entries.retain(|(n, _)| n != name);
            let new = values.iter().map(|v| (name.clone(), v.clone()));
            match at {
                Some(i) => {
                    let tail = entries.split_off(i);
                    entries.extend(new);
                    entries.extend(tail);
                }
                None => entries.extend(new),
            }
        }
    }
}

/// A form for an error message: its index, and its id or name.
fn describe((i, form): (usize, Node<'_>)) -> String {
    match (form.attr("id"), form.attr("name")) {
        (Some(id), _) => format!("{i} (id '{id}')"),
        (None, Some(name)) => format!("{i} (name '{name}')"),
        (None, None) => i.to_string(),
    }
}

/// The values a `<select>` submits, as a browser's selectedness gives them: every selected
/// option of a multiple select; else the last selected option, or the first option that is
/// not disabled when none is (for a drop-down, not a list box with `size` > 1). Disabled
/// options (or options of a disabled `<optgroup>`) are never sent.
fn selected_options(select: &Node<'_>) -> Result<Vec<String>> {
    // (option, disabled) in document order: the select's own options, and those of its
    // groups with the group's disabled state (walked per group, since an element cannot
    // name its parent).
    let mut options = Vec::new();
    for child in select
        .try_select("select > option, select > optgroup")?
        .iter()
    {
        if child.name() == "optgroup" {
            let group_disabled = child.attr("disabled").is_some();
            for option in child.try_select("option")?.iter() {
                let disabled = group_disabled || option.attr("disabled").is_some();
                options.push((option, disabled));
            }
        } else {
            let disabled = child.attr("disabled").is_some();
            options.push((child, disabled));
        }
    }
    let selected = |o: &&(Node<'_>, bool)| o.0.attr("selected").is_some();
    let chosen: Vec<&(Node<'_>, bool)> = if select.attr("multiple").is_some() {
        options.iter().filter(selected).collect()
    } else if let Some(last) = options.iter().rfind(|o| selected(o)) {
        vec![last]
    } else {
        let list_box = select
            .attr("size")
            .and_then(|s| s.trim().parse::<u32>().ok())
            .is_some_and(|size| size > 1);
        if list_box {
            Vec::new()
        } else {
            options
                .iter()
                .find(|(_, disabled)| !disabled)
                .into_iter()
                .collect()
        }
    };
    Ok(chosen
        .into_iter()
        .filter(|(_, disabled)| !disabled)
        .map(|(option, _)| option.attr("value").unwrap_or_else(|| option.text()))
        .collect())
}

/// A `<textarea>`'s text as written, its line breaks kept ([`Node::text`] collapses
/// whitespace): its text node untouched, as parsel's `::text` reads it.
fn textarea_value(textarea: &Node<'_>) -> String {
    textarea.select("::text").getall().concat()
}

/// Every line break as CR LF, as a form's entries are sent.
fn normalize_newlines(s: &str) -> String {
    s.replace("\r\n", "\n")
        .replace('\r', "\n")
        .replace('\n', "\r\n")
}

#[cfg(test)]
mod tests;
