from django.apps import AppConfig


class PeopleConfig(AppConfig):
    name = "people"
    verbose_name = "People"

    def ready(self) -> None:
        """Lend retrieval what it reads of the person asking (it sits below this app and cannot
        import it): the prompt's user layer and source feedback (``retrieval.hooks``), and the
        ``personal`` signal reranker."""
        from people import feedback, personalization
        from retrieval.hooks import person_hooks_register
        from retrieval.stages.rerank import reranker_register

        person_hooks_register(
            user_layer=personalization.user_layer_compose,
            source_feedback_counts=feedback.source_feedback_counts,
        )
        reranker_register("people.rerank", before="retrieval.stages.rerank.diversity")
