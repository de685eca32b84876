# No query reads Chunk.search_vector: BM25 walks knowledge_posting (retrieval/bm25_search.sql),
# so the generated tsvector column and its GIN index only cost space and write time.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0003_bm25_postings"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="chunk",
            name="chunk_search_vector_gin",
        ),
        migrations.RemoveField(
            model_name="chunk",
            name="search_vector",
        ),
    ]
