from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        # Every LLM call made inside llm.metering.llm_metered counts against the tenant's daily
        # LLM tokens, read and written here (retrieval.quotas), whichever layer binds the meter.
        from llm.metering import llm_meter_factory_set
        from retrieval.quotas import llm_meter_for

        llm_meter_factory_set(llm_meter_for)
