"""core.wire: the plain data that crosses the socket between the service and its clients.

The UI draws these and nothing else of core's packages (with the runtime face, the
service client, core.events and the settings): dataclasses, enums, errors as values and the pure
helpers that read them. Each module mirrors the package that fills its types, which
imports them from here and keeps them in its own face, so every arrow points down:
a module here imports only the standard library, core.events-level modules
(core.events, core.attach_errors, core.model_files.names, core.model_ids) and core.wire
(tests/unit/test_thin_client.py checks both).

- text.py            `visible`: outside text made safe to draw
- settings_rules.py  the rule each setting's value follows (the form and the config file)
- store.py           Conversation, Message, SearchHit, snippet_parts, StoreError
- workers.py         WorkerStatus, ModelStatus
- hub.py             search rows, repo files, download plans, local models,
                     recommendations and their fit, download progress, HubError
- tools.py           ToolStatus, RunResult, BlockRun, McpCallError, fenced Python blocks
- docs.py            Attachment, AttachmentRegistry, Mention(Resolution), DocError
- memory.py          RolloverMarker and the chat's marker helpers
- vision.py          StoredImage, is_image
- compare.py         CompareRefused, LEFT, RIGHT
- remote.py          remote_hint: the advice under a remote's error
- model_refs.py      how a conversation names its model (parse, display, remote refs)
"""
