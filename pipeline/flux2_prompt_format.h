// FLUX.2's prompt formatting, as diffusers' Flux2Pipeline does it
// (pipelines/flux2/pipeline_flux2.py: format_input + the tokenizer's chat template +
// apply_chat_template(padding="max_length", truncation=True)): a system message and one user
// message, rendered by the Mistral chat template, then tokenized as text that already carries its
// special tokens.
//
// No C++ Jinja engine is packaged, so the template is not executed: the conversation is rendered by
// RenderFlux2Conversation, which produces what the known template produces for it. A tokenizer
// folder whose template differs from the known ones in any byte is refused
// (CheckFlux2ChatTemplate), so a changed template can never silently give other embeddings.
//
// Stateless functions; safe from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ditserve::pipeline {

// diffusers' pipelines/flux2/system_messages.py SYSTEM_MESSAGE (from Black Forest Labs' flux2
// repository), the system prompt of every FLUX.2 text-to-image encode.
extern const char kFlux2SystemMessage[];

// The chat template of the tokenizer folder `dir`: chat_template.jinja, else chat_template.json's
// "chat_template", else tokenizer_config.json's "chat_template". NOT_FOUND when none has one.
absl::StatusOr<std::string> ReadChatTemplate(const std::string& dir);

// OK when `template_text` is a template ditserve renders (Mistral-Small-3.1's, which FLUX.2-dev's
// tokenizer folder ships); FAILED_PRECONDITION naming `where` and the first differing line
// otherwise.
absl::Status CheckFlux2ChatTemplate(const std::string& template_text, const std::string& where);

// What the known template renders for [system: kFlux2SystemMessage, user: prompt] with
// add_generation_prompt=False: bos + "[SYSTEM_PROMPT]" + system + "[/SYSTEM_PROMPT][INST]" +
// prompt + "[/INST]", after format_input removed every "[IMG]" from the prompt.
std::string RenderFlux2Conversation(const std::string& bos_token, const std::string& prompt);

}  // namespace ditserve::pipeline
