"""The web connector, end to end through the sync service, against a small site served locally."""

import gzip
from datetime import UTC, datetime

import pytest

from knowledge.connectors import web
from knowledge.connectors.web import WebConnector, page_read
from knowledge.models import Chunk, Document, DocumentVersion
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from tests.knowledge.web_site import Response, WebSite, html_page, page, site_pages, sitemap


@pytest.fixture(autouse=True)
def _loopback_sites_allowed(settings):
    """The test sites listen on 127.0.0.1, which the operator must open for fetches; their pages
    are read without pauses."""
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_WEB_MIN_CRAWL_DELAY_S = 0


@pytest.fixture
def site():
    with WebSite() as site:
        yield site


def _web_source(tenant, location, **fields):
    fields.setdefault("crawl_delay_s", 0)
    return source_create(tenant=tenant, name="site", kind="web", location=location, **fields)


def _three_pages(site):
    site.pages.update(
        {
            "/docs/install.html": page("Installing", "Install the package with pip and create the database."),
            "/docs/upgrade.html": page("Upgrading", "Read the release notes, then run the migrations."),
            "/docs/faq.html": page("Questions", "Answers about licences, support and the roadmap."),
        }
    )
    site.pages["/docs/sitemap.xml"] = sitemap(
        [site.url(p) for p in ("/docs/install.html", "/docs/upgrade.html", "/docs/faq.html")]
    )


def _live(tenant):
    return set(Document.objects.filter(tenant=tenant, deleted_at__isnull=True).values_list("external_id", flat=True))


def test_a_sitemap_lists_the_pages_the_first_sync_creates(tenant, site):
    _three_pages(site)
    run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap.xml")))
    assert (run.status, run.new, run.failed) == ("done", 3, 0), run.errors
    assert _live(tenant) == {site.url(p) for p in ("/docs/install.html", "/docs/upgrade.html", "/docs/faq.html")}
    install = Document.objects.get(tenant=tenant, external_id=site.url("/docs/install.html"))
    assert (install.title, install.uri, install.sync_key) == ("Installing", install.external_id, install.external_id)
    assert install.fingerprint.startswith("etag:")
    assert "pip" in install.versions.get(is_current=True).text


def test_a_second_sync_of_an_unchanged_site_costs_one_304_per_page_and_embeds_nothing(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    chunks = Chunk.objects.filter(tenant=tenant).count()
    site.reset_counts()
    run = source_sync(source=source)
    assert (run.status, run.new, run.updated, run.unchanged) == ("done", 0, 0, 3)
    for path in ("/docs/install.html", "/docs/upgrade.html", "/docs/faq.html"):
        assert site.statuses(path) == [304]
    assert Chunk.objects.filter(tenant=tenant).count() == chunks


def test_a_changed_page_becomes_a_new_version_and_the_others_stay_unchanged(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    site.pages["/docs/faq.html"] = page("Questions", "Answers about licences, support, pricing and the roadmap.")
    run = source_sync(source=source)
    assert (run.updated, run.unchanged) == (1, 2)
    faq = Document.objects.get(tenant=tenant, external_id=site.url("/docs/faq.html"))
    assert "pricing" in faq.versions.get(is_current=True).text


def test_a_page_that_disappears_is_marked_deleted(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    del site.pages["/docs/faq.html"]  # still in the sitemap, now answering 404
    run = source_sync(source=source)
    assert (run.status, run.deleted, run.unchanged) == ("done", 1, 2)
    faq = Document.objects.get(tenant=tenant, external_id=site.url("/docs/faq.html"))
    assert faq.deleted_at is not None
    assert not faq.versions.filter(is_current=True).exists()


def test_a_page_answering_500_fails_alone_and_its_document_stays_current(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    site.pages["/docs/faq.html"] = Response(500, "<h1>Oops</h1>")
    run = source_sync(source=source)
    faq_url = site.url("/docs/faq.html")
    assert (run.status, run.failed, run.unchanged, run.deleted) == ("done", 1, 2, 0)
    assert run.errors == [{"document": faq_url, "error": f"{faq_url}: the server answered 500"}]
    faq = Document.objects.get(tenant=tenant, external_id=faq_url)
    assert faq.deleted_at is None
    assert faq.versions.filter(is_current=True).exists()


def test_a_page_that_times_out_fails_alone(tenant, site, monkeypatch):
    monkeypatch.setattr(web, "TIMEOUT_S", 0.3)
    _three_pages(site)
    site.pages["/docs/faq.html"] = Response(200, html_page("Slow", "Slow answers."), {}, delay_s=1.0)
    run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap.xml")))
    faq_url = site.url("/docs/faq.html")
    assert (run.status, run.new, run.failed) == ("done", 2, 1)
    assert run.errors == [{"document": faq_url, "error": f"{faq_url}: could not fetch"}]  # never "timed out"


def test_a_path_robots_txt_disallows_is_never_requested(tenant, site):
    _three_pages(site)
    site.pages["/robots.txt"] = Response(
        200, "User-agent: *\nDisallow: /docs/faq.html\n", {"Content-Type": "text/plain"}
    )
    run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap.xml")))
    assert (run.status, run.new) == ("done", 2)
    assert site.hits["/docs/faq.html"] == 0
    assert site.url("/docs/faq.html") not in _live(tenant)


def test_robots_txt_forbidding_the_start_page_fails_the_run(tenant, site):
    _three_pages(site)
    site.pages["/robots.txt"] = Response(
        200, "User-agent: KnowledgeBaseBot\nDisallow: /\n", {"Content-Type": "text/plain"}
    )
    run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap.xml")))
    assert run.status == "failed"
    assert "robots.txt forbids" in run.error
    assert site.hits["/docs/sitemap.xml"] == 0


def test_a_longer_robots_crawl_delay_paces_the_requests(tenant, site):
    _three_pages(site)
    site.pages["/robots.txt"] = Response(200, "User-agent: *\nCrawl-delay: 7\n", {"Content-Type": "text/plain"})
    pauses = []
    source = _web_source(tenant, site.url("/docs/sitemap.xml"), crawl_delay_s=2)
    items = list(WebConnector(source, sleep=pauses.append).items({}))
    assert len(items) == 3
    # robots.txt, the sitemap and three pages: a pause before each request but the first.
    assert pauses == [7.0] * 4


def test_a_crawl_follows_links_on_the_host_under_the_start_folder_only(tenant, site):
    site.pages.update(
        {
            "/docs/index.html": page(
                "Handbook",
                "Start here for the handbook.",
                [
                    "guide.html#setup",
                    "/docs/guide.html",
                    "ref/api.html",
                    "/other/secret.html",
                    "http://localhost:1/docs/elsewhere.html",
                    "/docs/manual.pdf",
                    "mailto:team@example.com",
                ],
            ),
            "/docs/guide.html": page("Guide", "The guide explains every setting.", ["index.html", "../other/x.html"]),
            "/docs/ref/api.html": page("API", "The API reference lists every endpoint."),
            "/other/secret.html": page("Secret", "Not part of the handbook."),
            "/other/x.html": page("Other", "Not part of the handbook either."),
        }
    )
    run = source_sync(source=_web_source(tenant, site.url("/docs/index.html")))
    assert (run.status, run.new) == ("done", 3), run.errors
    assert _live(tenant) == {site.url(p) for p in ("/docs/index.html", "/docs/guide.html", "/docs/ref/api.html")}
    assert site.hits["/other/secret.html"] == site.hits["/other/x.html"] == site.hits["/docs/manual.pdf"] == 0
    assert site.hits["/docs/guide.html"] == 1


def test_a_crawl_requests_at_most_page_limit_pages(tenant, site):
    links = [f"/docs/p{i}.html" for i in range(6)]
    site.pages["/docs/index.html"] = page("Index", "All the pages of the handbook.", links)
    for i, link in enumerate(links):
        site.pages[link] = page(f"Page {i}", f"Page number {i} of the handbook.")
    run = source_sync(source=_web_source(tenant, site.url("/docs/index.html"), page_limit=3))
    assert (run.status, run.new) == ("done", 3)
    assert sum(hits for path, hits in site.hits.items() if path.startswith("/docs/")) == 3


def test_a_page_requested_only_for_its_links_that_fails_is_not_counted_as_failed(tenant, site):
    site.pages["/docs/index.html"] = page("Index", "All the pages of the handbook.", ["guide/a.html", "b.html"])
    site.pages["/docs/guide/a.html"] = page("A", "The first chapter of the guide.")
    site.pages["/docs/b.html"] = Response(500, "<h1>Server error</h1>")

    run = source_sync(source=_web_source(tenant, site.url("/docs/index.html"), include=["/docs/guide/*"]))

    assert (run.status, run.new, run.failed, run.errors) == ("done", 1, 0, [])
    assert site.hits["/docs/b.html"] == 1


def test_a_crawl_that_reaches_the_page_limit_keeps_the_known_pages_it_did_not_request(tenant, site):
    links = [f"/docs/p{i}.html" for i in range(4)]
    site.pages["/docs/index.html"] = page("Index", "All the pages of the handbook.", links)
    for i, link in enumerate(links):
        site.pages[link] = page(f"Page {i}", f"Page number {i} of the handbook.")
    source = _web_source(tenant, site.url("/docs/index.html"))
    source_sync(source=source)
    source.page_limit = 2
    source.save(update_fields=["page_limit"])
    site.reset_counts()

    run = source_sync(source=source)

    assert (run.status, run.deleted, run.unchanged) == ("done", 0, 5)
    assert len(_live(tenant)) == 5
    assert sum(hits for path, hits in site.hits.items() if path.startswith("/docs/")) == 2


def test_a_sitemap_longer_than_the_page_limit_keeps_the_known_pages_past_it(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    source.page_limit = 1
    source.save(update_fields=["page_limit"])
    site.reset_counts()

    run = source_sync(source=source)

    assert (run.status, run.deleted, run.unchanged) == ("done", 0, 3)
    assert site.hits["/docs/upgrade.html"] == site.hits["/docs/faq.html"] == 0


def test_a_crawl_follows_the_links_of_a_page_outside_include_without_storing_it(tenant, site):
    site.pages["/docs/index.html"] = page("Index", "All the pages of the handbook.", ["guide/a.html", "b.html"])
    site.pages["/docs/guide/a.html"] = page("A", "The first chapter of the guide.")
    site.pages["/docs/b.html"] = page("B", "Not in the guide.")
    run = source_sync(source=_web_source(tenant, site.url("/docs/index.html"), include=["/docs/guide/*"]))
    assert (run.status, run.new) == ("done", 1)
    assert _live(tenant) == {site.url("/docs/guide/a.html")}


def test_a_page_whose_meta_robots_says_noindex_is_not_stored_and_nofollow_links_are_not_followed(tenant, site):
    site.pages["/docs/index.html"] = page("Index", "All the pages of the handbook.", ["drafts.html", "a.html"])
    site.pages["/docs/a.html"] = page("A", "The first chapter of the handbook.")
    drafts = html_page("Drafts", "Unfinished chapters.", ["draft-1.html"])
    site.pages["/docs/drafts.html"] = Response(
        200, drafts.replace("</head>", '<meta name="robots" content="noindex, nofollow"></head>')
    )
    site.pages["/docs/draft-1.html"] = page("Draft", "A chapter nobody should read yet.")
    source = _web_source(tenant, site.url("/docs/index.html"))

    run = source_sync(source=source)

    assert (run.status, run.new) == ("done", 2)
    assert _live(tenant) == {site.url("/docs/index.html"), site.url("/docs/a.html")}
    assert site.hits["/docs/drafts.html"] == 1 and site.hits["/docs/draft-1.html"] == 0


def test_a_page_that_turns_noindex_is_marked_deleted(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    faq = html_page("Questions", "Answers about licences, support and the roadmap.")
    site.pages["/docs/faq.html"] = Response(
        200, faq.replace("</head>", '<meta name="KnowledgeBaseBot" content="none"></head>')
    )

    run = source_sync(source=source)

    assert (run.status, run.deleted, run.unchanged) == ("done", 1, 2)
    assert site.url("/docs/faq.html") not in _live(tenant)


def test_a_location_answering_a_sitemap_is_read_as_one(tenant, site):
    _three_pages(site)
    site.pages["/docs/pages"] = site.pages["/docs/sitemap.xml"]
    run = source_sync(source=_web_source(tenant, site.url("/docs/pages")))
    assert (run.status, run.new) == ("done", 3)


def test_a_second_crawl_reads_unchanged_pages_for_their_links_but_embeds_nothing(tenant, site):
    site.pages["/docs/index.html"] = page("Index", "All the pages of the handbook.", ["a.html"])
    site.pages["/docs/a.html"] = page("A", "The first chapter of the handbook.")
    source = _web_source(tenant, site.url("/docs/index.html"))
    source_sync(source=source)
    versions = DocumentVersion.objects.filter(document__tenant=tenant).count()
    run = source_sync(source=source)
    assert (run.status, run.new, run.updated, run.unchanged) == ("done", 0, 0, 2)
    assert DocumentVersion.objects.filter(document__tenant=tenant).count() == versions


def test_a_site_that_is_down_fails_the_run_and_nothing_changes(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    site.close()
    run = source_sync(source=source)
    assert run.status == "failed"
    assert "could not fetch" in run.error and run.error.endswith("Nothing changed.")
    assert len(_live(tenant)) == 3


def test_a_sitemap_answering_500_fails_the_run_and_nothing_changes(tenant, site):
    _three_pages(site)
    source = _web_source(tenant, site.url("/docs/sitemap.xml"))
    source_sync(source=source)
    site.pages["/docs/sitemap.xml"] = Response(503, "busy")
    run = source_sync(source=source)
    assert run.status == "failed"
    assert "the sitemap answered 503" in run.error
    assert len(_live(tenant)) == 3


def test_a_sitemap_index_is_followed_one_level(tenant, site):
    _three_pages(site)
    site.pages["/docs/sitemap-index.xml"] = Response(
        200,
        '<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<sitemap><loc>{site.url('/docs/sitemap.xml')}</loc></sitemap></sitemapindex>",
        {"Content-Type": "application/xml"},
    )
    run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap-index.xml"), exclude=["*/faq.html"]))
    assert (run.status, run.new) == ("done", 2)
    assert site.hits["/docs/faq.html"] == 0


def test_a_gzipped_sitemap_and_the_gzipped_sitemaps_of_an_index_are_read(tenant, site):
    _three_pages(site)
    listed = site.pages["/docs/sitemap.xml"].body
    site.pages["/docs/pages.xml.gz"] = Response(
        200, gzip.compress(listed.encode()), {"Content-Type": "application/gzip"}
    )
    index = f"<sitemapindex><sitemap><loc>{site.url('/docs/pages.xml.gz')}</loc></sitemap></sitemapindex>"
    site.pages["/docs/index.xml.gz"] = Response(
        200, gzip.compress(index.encode()), {"Content-Type": "application/x-gzip"}
    )

    run = source_sync(source=_web_source(tenant, site.url("/docs/index.xml.gz")))

    assert (run.status, run.new) == ("done", 3), run.error


def test_a_sitemap_lists_its_pages_not_their_images(tenant, site):
    _three_pages(site)
    site.pages["/docs/sitemap.xml"] = Response(
        200,
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
        f"<url><loc>{site.url('/docs/install.html')}</loc>"
        f"<image:image><image:loc>{site.url('/docs/logo.html')}</image:loc></image:image></url></urlset>",
        {"Content-Type": "application/xml"},
    )
    items = list(WebConnector(_web_source(tenant, site.url("/docs/sitemap.xml"))).items({}))
    assert [item.key for item in items] == [site.url("/docs/install.html")]
    assert site.hits["/docs/logo.html"] == 0


def test_a_redirect_is_followed_on_the_host_only(tenant, site):
    _three_pages(site)
    site.pages["/docs/upgrade.html"] = Response(301, "", {"Location": "/docs/upgrading.html"})
    site.pages["/docs/upgrading.html"] = page("Upgrading", "Read the release notes, then run the migrations.")
    site.pages["/docs/faq.html"] = Response(302, "", {"Location": "http://localhost:1/faq.html"})
    run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap.xml")))
    assert (run.status, run.new, run.failed) == ("done", 2, 0)
    assert _live(tenant) == {site.url("/docs/install.html"), site.url("/docs/upgrading.html")}


def test_a_generated_site_of_200_pages_syncs_200_new_documents(tenant):
    with WebSite() as site:
        site.pages.update(site_pages(200, words=12, base=site.url("")))
        run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap.xml")))
    assert (run.status, run.new, run.failed) == ("done", 200, 0), run.errors[:3]


def test_a_page_is_read_as_markdown_with_its_title_sections_and_date():
    html = (
        "<html><head><title>Release notes</title><meta name='date' content='2024-03-05'></head><body><main>"
        "<h1>Release notes</h1><p>This release adds a faster search and a new portal.</p>"
        "<h2>Upgrading</h2><p>Run the migrations before starting the workers again.</p>"
        "<table><tr><th>Setting</th><th>Default</th></tr><tr><td>KB_WORKERS</td><td>2</td></tr></table>"
        "</main></body></html>"
    )
    document = page_read(html.encode(), url="http://h/docs/notes.html")
    assert (document.external_id, document.uri, document.title) == (
        "http://h/docs/notes.html",
        "http://h/docs/notes.html",
        "Release notes",
    )
    assert [s.heading for s in document.sections] == ["Release notes", "Upgrading"]
    assert "| KB_WORKERS | 2 |" in document.text  # tables kept, not escaped
    assert document.published_at == datetime(2024, 3, 5, tzinfo=UTC)


def test_a_page_without_text_fails_alone(tenant, site):
    _three_pages(site)
    site.pages["/docs/faq.html"] = Response(200, "<html><head></head><body><script>x()</script></body></html>")
    run = source_sync(source=_web_source(tenant, site.url("/docs/sitemap.xml")))
    assert (run.status, run.new, run.failed) == ("done", 2, 1)
    assert "holds no text" in run.errors[0]["error"]
