from django.apps import AppConfig


class PeopleConfig(AppConfig):
    """People: memberships' conversations, profiles, history, feedback and attachments. What a
    retrieval run reads of the person asking (the prompt's user layer, source feedback, the
    ``personal`` signal reranker) is named in the settings' run registry (``retrieval.registry``)."""

    name = "people"
    verbose_name = "People"
