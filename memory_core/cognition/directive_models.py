"""Inputs and outputs of the procedural-memory skills (seeds/003 "Memória Procedural").

A *directive* is a behavioural instruction a user gives the assistant ("always answer in
Portuguese", "don't call me sir"). It is always written in English (SPEC W20), whatever the
conversation's language, so that directives compare with each other and merge into one block.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ContradictionInput",
    "ContradictionOutput",
    "DirectiveBlockInput",
    "DirectiveBlockOutput",
    "DirectiveDetectionInput",
    "DirectiveDetectionOutput",
    "ExtractedDirective",
]


class _Model(BaseModel):
    # LLMs add keys of their own; ignoring them keeps a useful answer usable.
    model_config = ConfigDict(extra="ignore")


class ExtractedDirective(_Model):
    """A behavioural instruction to the assistant, rewritten as one short English imperative."""

    text: str = Field(min_length=1, max_length=500, description="one short imperative sentence in English")
    confidence: float = Field(default=0.8, ge=0.0, le=1.0, description="how clearly the message asks for it")


class DirectiveDetectionInput(_Model):
    """One message and its speaker, searched for instructions about how the assistant should behave."""

    message: str
    speaker_name: str = ""


class DirectiveDetectionOutput(_Model):
    """The directives a message gives (empty for almost every message)."""

    directives: list[ExtractedDirective] = Field(default_factory=list)


class ContradictionInput(_Model):
    """A new directive and an existing one close to it in meaning."""

    new_directive: str
    existing_directive: str


class ContradictionOutput(_Model):
    """Whether following the new directive makes following the existing one impossible."""

    contradicts: bool = False
    reason: str = ""


class DirectiveBlockInput(_Model):
    """A persona and the active directives (strongest first), to merge into one instruction block."""

    persona: str = ""
    directives: list[str] = Field(default_factory=list)
    max_tokens: int = Field(default=300, ge=1)


class DirectiveBlockOutput(_Model):
    """One cohesive block of behavioural instructions, in English."""

    text: str = ""
