"""REST API of the files a member attaches to their conversations (``people.attachments``).

``POST /api/v1/conversations/{id}/files/`` (multipart, field ``file``) attaches a file to one of
the caller's conversations, ``POST /api/v1/conversations/files/`` to a new conversation named after
the file; ``GET`` on the first lists the conversation's files and
``DELETE /api/v1/conversations/{id}/files/{file_id}/`` removes one. Asking with that conversation
(``POST /api/v1/ask/`` with ``conversation``) then searches the tenant's documents plus its files.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, ErrorSerializer
from core.memberships import tenant_for_request
from core.uploads import upload_refusal_raise
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS
from people.attachments import conversation_file_attach, conversation_file_list, conversation_file_remove


@extend_schema_serializer(component_name="ConversationFileInput")
class FileInputSerializer(serializers.Serializer):
    file = serializers.FileField(
        allow_empty_file=True,
        help_text=f"The file to ask about: {' '.join(e for e in SUPPORTED_EXTENSIONS if e != '.jsonl')}.",
    )


@extend_schema_serializer(component_name="ConversationFileOutput")
class FileOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    conversation_id = serializers.IntegerField(help_text="Ask with this conversation to search the file.")
    name = serializers.CharField(help_text="The file's name as attached (the title its citations show).")
    size = serializers.IntegerField(help_text="Bytes.")
    document_id = serializers.IntegerField(help_text="The private document the file became; citations name it.")
    pages = serializers.SerializerMethodField(help_text="Pages of a paged file (PDF, slides); null otherwise.")
    created_at = serializers.DateTimeField()

    def get_pages(self, attached) -> int | None:
        pages = (attached.document.metadata or {}).get("pages")
        return pages if isinstance(pages, int) else None


def _attached(request, conversation_id: int | None):
    body = request.data  # the upload limits stop the body while it streams in (core.uploads)
    upload_refusal_raise(request)  # 413 over the limit, before any field is looked at
    serializer = FileInputSerializer(data=body)
    serializer.is_valid(raise_exception=True)
    upload = serializer.validated_data["file"]
    attached = conversation_file_attach(
        tenant=tenant_for_request(request),
        user=request.user,
        file_name=upload.name,
        # One byte past the limit: enough for the service to refuse an oversized file.
        data=upload.read(settings.KB_MAX_UPLOAD_BYTES + 1),
        conversation_id=conversation_id,
    )
    return Response(FileOutputSerializer(attached).data, status=status.HTTP_201_CREATED)


FILE_ERRORS = {413: ErrorSerializer, 415: ErrorSerializer, **ERRORS}


class ConversationFileListApi(APIView):
    """The files attached to one of the caller's conversations; ``POST`` attaches one (multipart).

    The file is parsed at once (PDFs, office files, reST and HTML in the parse sandbox): a
    ``201`` with the file, or an error and nothing stored (400 for an empty, damaged or unreadable
    file, 413 past the upload limit, 415 for an unsupported type, 403 past a quota or for a
    viewer, 404 for a conversation that is not the caller's).
    """

    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(operation_id="conversation_files_list", responses={200: FileOutputSerializer(many=True), **ERRORS})
    def get(self, request, conversation_id: int):
        files = conversation_file_list(
            tenant=tenant_for_request(request), user=request.user, conversation_id=conversation_id
        )
        return Response(FileOutputSerializer(files, many=True).data)

    @extend_schema(
        operation_id="conversation_files_attach",
        request={"multipart/form-data": FileInputSerializer},
        responses={201: FileOutputSerializer, **FILE_ERRORS},
    )
    def post(self, request, conversation_id: int):
        return _attached(request, conversation_id)


class ConversationFileNewApi(APIView):
    """Attach a file to a new conversation of the caller, titled after the file (multipart); the
    reply's ``conversation_id`` is the conversation to ask in. Errors as attaching to an existing one."""

    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        operation_id="conversation_files_attach_new",
        request={"multipart/form-data": FileInputSerializer},
        responses={201: FileOutputSerializer, **FILE_ERRORS},
    )
    def post(self, request):
        return _attached(request, None)


class ConversationFileDetailApi(APIView):
    """Remove a file from one of the caller's conversations: its document, versions and chunks are
    deleted. 404 for a file not attached to that conversation of the caller."""

    @extend_schema(operation_id="conversation_files_remove", responses={204: None, **ERRORS})
    def delete(self, request, conversation_id: int, file_id: int):
        conversation_file_remove(
            tenant=tenant_for_request(request), user=request.user, conversation_id=conversation_id, file_id=file_id
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
