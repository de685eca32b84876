"""The web connector, end to end through the sync service, against a site served on 127.0.0.1."""

import pytest

from knowledge.connectors import web
from knowledge.connectors.web import USER_AGENT, WebConnector, page_read, url_normalize
from knowledge.models import Chunk, Document, DocumentVersion, SyncRun
from knowledge.selectors import document_list
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from tests.knowledge.web_site import page_html, site_pages_generate, site_serve, sitemap_xml


def web_source(tenant, location, **fields):
    return source_create(tenant=tenant, name="site", kind="web", location=location, crawl_delay_s=0, **fields)


def current_uris(tenant):
    return sorted(d.uri for d in document_list(tenant=tenant))


def chunk_ids(tenant):
    return set(Chunk.objects.filter(tenant=tenant).values_list("id", flat=True))


GUIDE = page_html(
    "Install guide",
    "Install the package with pip, then run the migrations and start the server on port 8000.",
    head='<meta property="article:published_time" content="2024-03-05T10:00:00+00:00">',
).replace(
    "</main>",
    "<h2>Requirements</h2><p>You need Python 3.11 and PostgreSQL 16 with the pgvector extension.</p></main>",
)
FAQ = page_html("Questions", "Backups run every night at two and are kept for thirty days on a second disk.")
TEAM = page_html("The team", "Four people look after the service: two developers, one designer and one writer.")


@pytest.fixture
def docs_site():
    """Three pages under /docs/ listed by /docs/sitemap.xml, which also lists a page elsewhere."""
    with site_serve({"/docs/guide.html": GUIDE, "/docs/faq.html": FAQ, "/docs/team.html": TEAM}) as site:
        site.pages["/docs/sitemap.xml"] = sitemap_xml(
            [site.url(p) for p in ("/docs/guide.html", "/docs/faq.html", "/docs/team.html", "/blog/post.html")]
        )
        site.pages["/blog/post.html"] = page_html("A blog post", "Outside the documentation folder.")
        yield site


def test_a_sitemap_lists_the_pages_that_are_read_with_their_title_sections_and_date(tenant, docs_site):
    source = web_source(tenant, docs_site.url("/docs/sitemap.xml"))

    run = source_sync(source=source)

    assert (run.status, run.new, run.failed, run.error) == ("done", 3, 0, "")
    assert current_uris(tenant) == [docs_site.url(f"/docs/{p}.html") for p in ("faq", "guide", "team")]
    guide = Document.objects.get(tenant=tenant, external_id=docs_site.url("/docs/guide.html"))
    version = guide.versions.get(is_current=True)
    assert guide.title == "Install guide"
    assert "pgvector extension" in version.text and "Requirements" in version.text
    assert version.published_at.isoformat() == "2024-03-05T00:00:00+00:00"
    assert guide.sync_key == guide.external_id and "sha256:" in guide.fingerprint
    assert docs_site.fetched("/blog/post.html") == 0  # outside the sitemap's folder


def test_a_second_sync_of_unchanged_pages_is_answered_by_304_and_embeds_nothing(tenant, docs_site):
    source = web_source(tenant, docs_site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    before = chunk_ids(tenant)
    docs_site.reset_counts()

    run = source_sync(source=source)

    assert (run.status, run.new, run.updated, run.unchanged) == ("done", 0, 0, 3)
    assert docs_site.answered(304) == 3 and docs_site.answered(200) == 1  # the sitemap alone came whole
    assert chunk_ids(tenant) == before
    assert DocumentVersion.objects.filter(document__tenant=tenant).count() == 3


def test_a_changed_page_gets_a_new_version_and_the_others_stay_unchanged(tenant, docs_site):
    source = web_source(tenant, docs_site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    docs_site.pages["/docs/faq.html"] = FAQ.replace("thirty days", "ninety days")

    run = source_sync(source=source)

    assert (run.new, run.updated, run.unchanged) == (0, 1, 2)
    faq = Document.objects.get(tenant=tenant, external_id=docs_site.url("/docs/faq.html"))
    assert "ninety days" in faq.versions.get(is_current=True).text


def test_a_page_that_disappears_is_marked_deleted(tenant, docs_site):
    source = web_source(tenant, docs_site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    del docs_site.pages["/docs/team.html"]  # 404, still listed by the sitemap

    run = source_sync(source=source)

    assert (run.status, run.deleted, run.unchanged) == ("done", 1, 2)
    team = Document.objects.get(tenant=tenant, external_id=docs_site.url("/docs/team.html"))
    assert team.deleted_at is not None
    assert not team.versions.filter(is_current=True).exists()
    assert docs_site.url("/docs/team.html") not in current_uris(tenant)


def test_a_page_that_answers_500_fails_alone_and_keeps_its_document(tenant, docs_site):
    source = web_source(tenant, docs_site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    docs_site.status["/docs/faq.html"] = 500

    run = source_sync(source=source)

    faq_url = docs_site.url("/docs/faq.html")
    assert (run.status, run.failed, run.deleted, run.unchanged) == ("done", 1, 0, 2)
    assert run.errors == [{"document": faq_url, "error": f"{faq_url}: the server answered 500."}]
    faq = Document.objects.get(tenant=tenant, external_id=faq_url)
    assert faq.deleted_at is None and faq.versions.filter(is_current=True).exists()


def test_a_site_that_is_down_fails_the_run_with_the_reason_and_changes_nothing(tenant):
    with site_serve({"/docs/index.html": FAQ}) as site:
        source = web_source(tenant, site.url("/docs/index.html"))
        source_sync(source=source)
        before = chunk_ids(tenant)
    # The server is gone now: nothing listens on its port.

    run = source_sync(source=source)

    assert run.status == "failed"
    assert "could not connect (connection refused)" in run.error and "Nothing changed." in run.error
    assert current_uris(tenant) == [site.url("/docs/index.html")] and chunk_ids(tenant) == before


def test_a_start_page_that_answers_503_fails_the_run_and_changes_nothing(tenant, docs_site):
    source = web_source(tenant, docs_site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    docs_site.status["/docs/sitemap.xml"] = 503

    run = source_sync(source=source)

    assert run.status == "failed" and "the server answered 503" in run.error
    assert len(current_uris(tenant)) == 3


def test_a_page_that_answers_too_late_fails_alone(tenant, docs_site, monkeypatch):
    monkeypatch.setattr(web, "TIMEOUT_S", 0.3)
    source = web_source(tenant, docs_site.url("/docs/sitemap.xml"))
    docs_site.delays["/docs/team.html"] = 1.0

    run = source_sync(source=source)

    team_url = docs_site.url("/docs/team.html")
    assert (run.status, run.new, run.failed) == ("done", 2, 1)
    assert run.errors == [{"document": team_url, "error": f"{team_url}: no answer within 0.3 s."}]


def test_a_sitemap_index_is_followed_one_level(tenant, docs_site):
    docs_site.pages["/docs/sitemap-a.xml"] = sitemap_xml([docs_site.url("/docs/guide.html")])
    docs_site.pages["/docs/sitemap-b.xml"] = sitemap_xml([docs_site.url("/docs/faq.html")])
    entries = "".join(
        f"<sitemap><loc>{docs_site.url(p)}</loc></sitemap>" for p in ("/docs/sitemap-a.xml", "/docs/sitemap-b.xml")
    )
    docs_site.pages["/docs/index.xml"] = (
        "text/xml",
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>',
    )
    source = web_source(tenant, docs_site.url("/docs/index.xml"))

    run = source_sync(source=source)

    assert run.new == 2
    assert current_uris(tenant) == [docs_site.url("/docs/faq.html"), docs_site.url("/docs/guide.html")]


def test_a_sitemap_of_an_index_that_cannot_be_fetched_fails_the_run(tenant, docs_site):
    entries = f"<sitemap><loc>{docs_site.url('/docs/missing.xml')}</loc></sitemap>"
    docs_site.pages["/docs/index.xml"] = ("application/xml", f"<sitemapindex>{entries}</sitemapindex>")
    source = web_source(tenant, docs_site.url("/docs/index.xml"))

    run = source_sync(source=source)

    assert run.status == "failed" and "missing.xml could not be fetched: the server answered 404" in run.error


def test_an_xml_location_that_is_not_a_sitemap_fails_the_run(tenant, docs_site):
    docs_site.pages["/docs/feed.xml"] = ("application/rss+xml", "<rss><channel><title>News</title></channel></rss>")
    source = web_source(tenant, docs_site.url("/docs/feed.xml"))

    run = source_sync(source=source)

    assert run.status == "failed" and "is not a sitemap" in run.error


def crawl_site():
    """/docs/index.html links to two pages, a page under /other/, another host, a PDF and a private page."""
    return {
        "/docs/index.html": page_html(
            "Handbook",
            "The handbook of the team: read the guide first.",
            [
                "guide.html#install",
                "/docs/faq.html",
                "/other/secret.html",
                "http://localhost:1/docs/away.html",
                "manual.pdf",
                "private/salaries.html",
            ],
        ),
        "/docs/guide.html": GUIDE,
        "/docs/faq.html": FAQ.replace("</ul>", '<li><a href="index.html">Home</a></li></ul>'),
        "/docs/manual.pdf": ("application/pdf", b"%PDF-1.4 not a page"),
        "/docs/private/salaries.html": page_html("Salaries", "Nobody should read this page."),
        "/other/secret.html": page_html("Elsewhere", "Outside the crawl's folder."),
        "/robots.txt": ("text/plain", "User-agent: *\nDisallow: /docs/private/\n"),
    }


def test_a_crawl_follows_links_within_its_host_and_folder_only(tenant):
    with site_serve(crawl_site()) as site:
        source = web_source(tenant, site.url("/docs/index.html"))

        run = source_sync(source=source)

        assert (run.status, run.new, run.failed) == ("done", 3, 0)
        assert current_uris(tenant) == [site.url(f"/docs/{p}.html") for p in ("faq", "guide", "index")]
        assert site.fetched("/other/secret.html") == 0
        assert site.fetched("/docs/index.html") == 1 and site.fetched("/docs/guide.html") == 1  # fragment dropped


def test_robots_txt_keeps_a_disallowed_page_unfetched(tenant):
    with site_serve(crawl_site()) as site:
        source = web_source(tenant, site.url("/docs/index.html"))

        source_sync(source=source)

        assert site.fetched("/robots.txt") == 1
        assert site.fetched("/docs/private/salaries.html") == 0


def test_robots_txt_forbidding_the_start_page_fails_the_run(tenant):
    pages = crawl_site() | {"/robots.txt": ("text/plain", "User-agent: KnowledgeBaseBot\nDisallow: /\n")}
    with site_serve(pages) as site:
        source = web_source(tenant, site.url("/docs/index.html"))

        run = source_sync(source=source)

        assert run.status == "failed" and "robots.txt forbids" in run.error
        assert site.fetched("/docs/index.html") == 0


def test_a_crawl_reads_no_more_pages_than_the_page_limit(tenant):
    with site_serve(site_pages_generate(7)) as site:
        source = web_source(tenant, site.url("/docs/page-0.html"), page_limit=3)

        run = source_sync(source=source)

        assert run.new == 3
        assert sum(site.fetched(f"/docs/page-{i}.html") for i in range(7)) == 3


def test_a_page_beyond_the_page_limit_is_kept_not_deleted(tenant):
    with site_serve(site_pages_generate(5)) as site:
        source = web_source(tenant, site.url("/docs/page-0.html"))
        source_sync(source=source)
        source.page_limit = 2
        source.save(update_fields=["page_limit"])

        run = source_sync(source=source)

        assert (run.deleted, run.unchanged) == (0, 5)
        assert len(current_uris(tenant)) == 5


def current_chunk_ids(tenant, url):
    return set(
        Chunk.objects.filter(tenant=tenant, version__document__external_id=url, is_current=True).values_list(
            "id", flat=True
        )
    )


def test_a_second_crawl_neither_reads_nor_embeds_unchanged_pages_and_finds_the_new_ones(tenant, monkeypatch):
    with site_serve(crawl_site()) as site:
        source = web_source(tenant, site.url("/docs/index.html"))
        source_sync(source=source)
        unchanged = [site.url("/docs/index.html"), site.url("/docs/faq.html")]
        before = {url: current_chunk_ids(tenant, url) for url in unchanged}
        site.pages["/docs/guide.html"] = GUIDE.replace("</ul>", '<li><a href="news.html">News</a></li></ul>')
        site.pages["/docs/news.html"] = page_html("News", "The office moves to the harbour district in May.")

        read = []
        monkeypatch.setattr(web, "page_read", lambda html, *, url: read.append(url) or page_read(html, url=url))

        run = source_sync(source=source)

        assert sorted(read) == [site.url("/docs/guide.html"), site.url("/docs/news.html")]

        assert (run.status, run.new, run.deleted, run.updated + run.unchanged) == ("done", 1, 0, 3)
        assert site.url("/docs/news.html") in current_uris(tenant)
        assert {url: current_chunk_ids(tenant, url) for url in unchanged} == before
        assert DocumentVersion.objects.filter(document__external_id__in=unchanged).count() == 2


def test_include_and_exclude_globs_match_url_paths(tenant):
    pages = crawl_site() | {
        "/docs/api/one.html": page_html("API one", "The first endpoint lists the orders of a customer."),
        "/docs/api/two.html": page_html("API two", "The second endpoint cancels an order that has not shipped."),
    }
    pages["/docs/faq.html"] = pages["/docs/faq.html"].replace("</ul>", '<li><a href="api/one.html">1</a></li></ul>')
    pages["/docs/faq.html"] = pages["/docs/faq.html"].replace("</ul>", '<li><a href="api/two.html">2</a></li></ul>')
    with site_serve(pages) as site:
        source = web_source(tenant, site.url("/docs/index.html"), include=["/docs/api/*"], exclude=["*/two.html"])

        run = source_sync(source=source)

        assert run.new == 1 and current_uris(tenant) == [site.url("/docs/api/one.html")]
        assert site.fetched("/docs/faq.html") == 1  # read for its links only
        assert site.fetched("/docs/api/two.html") == 0


def test_a_page_without_text_fails_alone(tenant):
    pages = {"/docs/index.html": page_html("Home", "Welcome to the handbook.", ["empty.html"])}
    pages["/docs/empty.html"] = "<html><head></head><body>   </body></html>"
    with site_serve(pages) as site:
        source = web_source(tenant, site.url("/docs/index.html"))

        run = source_sync(source=source)

        assert (run.new, run.failed) == (1, 1)
        assert run.errors[0]["error"] == f"{site.url('/docs/empty.html')}: the page has no text."


def test_a_redirect_within_the_site_is_followed_and_one_to_another_host_is_not(tenant):
    pages = {"/docs/index.html": page_html("Home", "Welcome to the handbook.", ["old.html", "away.html"])}
    pages["/docs/new.html"] = FAQ
    with site_serve(pages) as site:
        site.redirects["/docs/old.html"] = "/docs/new.html"
        site.redirects["/docs/away.html"] = "http://localhost:1/elsewhere.html"
        source = web_source(tenant, site.url("/docs/index.html"))

        run = source_sync(source=source)

        assert run.new == 2
        assert current_uris(tenant) == [site.url("/docs/index.html"), site.url("/docs/new.html")]


def test_a_generated_200_page_site_syncs_into_200_documents(tenant):
    with site_serve(site_pages_generate(200)) as site:
        source = web_source(tenant, site.url("/docs/page-0.html"), page_limit=500)

        run = source_sync(source=source)

        assert (run.status, run.new, run.failed) == ("done", 200, 0)
        assert Document.objects.filter(tenant=tenant, deleted_at__isnull=True).count() == 200


@pytest.mark.parametrize("crawl_delay_s,robots_delay,expected", [(0.5, 2, 2.0), (3.0, 2, 3.0)])
def test_requests_are_spaced_by_the_longer_of_the_source_delay_and_robots_crawl_delay(
    tenant, crawl_delay_s, robots_delay, expected
):
    pages = crawl_site() | {"/robots.txt": ("text/plain", f"User-agent: *\nCrawl-delay: {robots_delay}\n")}
    waits = []
    with site_serve(pages) as site:
        source = source_create(
            tenant=tenant, name="slow", kind="web", location=site.url("/docs/index.html"), crawl_delay_s=crawl_delay_s
        )
        connector = WebConnector(source, sleep=waits.append, clock=lambda: 100.0)  # no time passes

        items = list(connector.items({}))

    # robots.txt, then the index, the guide, the FAQ, the PDF and the private page (robots.txt allows it here).
    assert len(items) == 4 and connector.fetches == 6
    assert waits == [expected] * 5


def test_every_request_names_the_bot_in_its_user_agent(tenant, docs_site):
    source_sync(source=web_source(tenant, docs_site.url("/docs/sitemap.xml")))

    assert docs_site.user_agents == {USER_AGENT}


@pytest.mark.parametrize(
    "url,expected",
    [
        ("HTTP://Example.COM:80/a/b.html#top", "http://example.com/a/b.html"),
        ("https://example.com", "https://example.com/"),
        ("https://user:pw@example.com:8443/x?q=1", "https://example.com:8443/x?q=1"),
        ("mailto:someone@example.com", None),
        ("ftp://example.com/file", None),
    ],
)
def test_urls_are_normalized(url, expected):
    assert url_normalize(url) == expected


def test_relative_links_resolve_against_their_page():
    assert url_normalize("../b.html", "http://h/docs/a/x.html") == "http://h/docs/b.html"


def test_two_tenants_syncing_one_site_each_get_their_own_documents(tenant, other_tenant_corpus, docs_site):
    web_source(tenant, docs_site.url("/docs/sitemap.xml"))
    theirs = source_create(
        tenant=other_tenant_corpus,
        name="site",
        kind="web",
        location=docs_site.url("/docs/sitemap.xml"),
        crawl_delay_s=0,
    )

    run = source_sync(source=theirs)

    assert run.new == 3
    assert len(current_uris(tenant)) == 0 and len(current_uris(other_tenant_corpus)) == 4
    assert SyncRun.objects.filter(tenant=tenant).count() == 0
