"""The portal's forms: a question, feedback on an answer, the profile, an upload. They parse input
only; the views in ``portal.views`` call the services with what they clean."""

from __future__ import annotations

from django import forms
from django.conf import global_settings

from people.feedback import MAX_COMMENT_CHARS
from people.models import Profile
from retrieval.pipeline import PIPELINE_NAMES


class AskForm(forms.Form):
    question = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "autofocus": True, "placeholder": "Ask a question…"}),
    )
    pipeline = forms.ChoiceField(
        choices=[("", "default")] + [(name, name) for name in PIPELINE_NAMES],
        required=False,
        help_text="How to search: the tenant's default, or a named pipeline.",
    )
    conversation = forms.IntegerField(min_value=1, max_value=2**63 - 1, required=False, widget=forms.HiddenInput)
    as_of = forms.DateField(
        required=False,
        input_formats=["%Y-%m-%d"],
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        label="As of",
        help_text="Answer from the document versions current on that day (empty: current versions).",
    )
    personalize = forms.BooleanField(
        required=False,
        initial=True,
        label="Personalize",
        help_text="Rank what your profile prefers and you found useful higher, and shape the answer for you.",
    )


class FeedbackForm(forms.Form):
    trace = forms.IntegerField(min_value=1, max_value=2**63 - 1, widget=forms.HiddenInput)
    citation = forms.IntegerField(min_value=1, max_value=1000, required=False, widget=forms.HiddenInput)
    rating = forms.ChoiceField(choices=(("up", "Helpful"), ("down", "Not helpful")))
    comment = forms.CharField(max_length=MAX_COMMENT_CHARS, required=False)


class ProfileForm(forms.Form):
    title = forms.CharField(label="Role or title", max_length=200, required=False)
    team = forms.CharField(max_length=200, required=False)
    expertise = forms.ChoiceField(choices=[("", "not said"), *Profile.Expertise.choices], required=False)
    language = forms.ChoiceField(
        label="Preferred language", choices=[("", "not said"), *global_settings.LANGUAGES], required=False
    )
    preferred_sources = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    muted_sources = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    about = forms.CharField(label="About me", max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 4}))

    def __init__(self, *args, source_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("preferred_sources", "muted_sources"):
            self.fields[name].choices = [(n, n) for n in source_names]


class UploadForm(forms.Form):
    """Where the upload form's files go: one of the tenant's upload sources, or a new one by name.
    The files themselves are the request's ``files`` (several), read by ``sources``."""

    source = forms.ChoiceField(label="Upload into", required=False)
    new_source = forms.CharField(
        label="New source",
        max_length=200,
        required=False,
        help_text="A name typed here is used instead of the list: a new upload source, or one of the list's.",
    )

    def __init__(self, *args, source_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["source"].choices = [(n, n) for n in source_names] + [("", "a new source (name it below)")]
        self.fields["source"].initial = source_names[0] if source_names else ""

    def source_name(self) -> str:
        return self.cleaned_data["new_source"].strip() or self.cleaned_data["source"]
