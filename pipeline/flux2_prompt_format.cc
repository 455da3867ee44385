#include "pipeline/flux2_prompt_format.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::pipeline {
namespace {

// Mistral-Small-3.1-24B-Instruct-2503's chat template, byte for byte, as FLUX.2-dev's tokenizer
// folder ships it (chat_template.jinja).
constexpr char kMistralSmall31Template[] = R"tmpl({%- set today = strftime_now("%Y-%m-%d") %}
{%- set default_system_message = "You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\nYour knowledge base was last updated on 2023-10-01. The current date is " + today + ".\n\nWhen you're not sure about some information, you say that you don't have the information and don't make up anything.\nIf the user's question is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do not try to answer it right away and you rather ask the user to clarify their request (e.g. \"What are some good restaurants around me?\" => \"Where are you?\" or \"When is the next flight to Tokyo\" => \"Where do you travel from?\")" %}

{{- bos_token }}

{%- if messages[0]['role'] == 'system' %}
    {%- if messages[0] is string %}
        {%- set system_message = messages[0]['content'] %}
        {%- set loop_messages = messages[1:] %}
    {%- else %} 
        {%- set system_message = messages[0]['content'][0]['text'] %}
        {%- set loop_messages = messages[1:] %}
    {%- endif %}
{%- else %}
    {%- set system_message = default_system_message %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}

{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
            {%- if message['content'] is string %}
            {{- '[INST]' + message['content'] + '[/INST]' }}
            {%- else %}
                    {{- '[INST]' }}
                    {%- for block in message['content'] %}
                            {%- if block['type'] == 'text' %}
                                    {{- block['text'] }}
                            {%- elif block['type'] == 'image' or block['type'] == 'image_url' %}
                                    {{- '[IMG]' }}
                                {%- else %}
                                    {{- raise_exception('Only text and image blocks are supported in message content!') }}
                                {%- endif %}
                        {%- endfor %}
                    {{- '[/INST]' }}
                {%- endif %}
    {%- elif message['role'] == 'system' %}
        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}
    {%- elif message['role'] == 'assistant' %}
        {%- if message['content'] is string %}
            {{- message['content'] + eos_token }}
        {%- else %}
            {{- message['content'][0]['text'] + eos_token }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Only user, system and assistant roles are supported!') }}
    {%- endif %}
{%- endfor %})tmpl";

bool FileExists(const std::string& path) {
  return ReadTextFile(path).ok();
}

}  // namespace

const char kFlux2SystemMessage[] =
    "You are an AI that reasons about image descriptions. You give structured responses focusing "
    "on object relationships, object\n"
    "attribution and actions without speculation.";

absl::StatusOr<std::string> ReadChatTemplate(const std::string& dir) {
  const std::string jinja = dir + "/chat_template.jinja";
  if (FileExists(jinja)) return ReadTextFile(jinja);
  for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (!FileExists(path)) continue;
    ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonObjectFile(path));
    auto it = j.find("chat_template");
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": \"chat_template\" must be a string (one named template)"));
    }
    return it->get<std::string>();
  }
  return absl::NotFoundError(absl::StrCat(
      dir,
      ": no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json)"));
}

absl::Status CheckFlux2ChatTemplate(const std::string& template_text, const std::string& where) {
  const std::string known = kMistralSmall31Template;
  if (template_text == known) return absl::OkStatus();
  std::istringstream a(template_text), b(known);
  std::string la, lb;
  int line = 0;
  while (true) {
    ++line;
    const bool ga = static_cast<bool>(std::getline(a, la));
    const bool gb = static_cast<bool>(std::getline(b, lb));
    if (!ga || !gb || la != lb) break;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      where,
      ": the chat template differs from the one ditserve renders (Mistral-Small-3.1's, as "
      "FLUX.2-dev ships it) at line ",
      line, "; a different template could change the prompt embeddings, so the model is refused"));
}

std::string RenderFlux2Conversation(const std::string& bos_token, const std::string& prompt) {
  return absl::StrCat(bos_token, "[SYSTEM_PROMPT]", kFlux2SystemMessage, "[/SYSTEM_PROMPT][INST]",
                      absl::StrReplaceAll(prompt, {{"[IMG]", ""}}), "[/INST]");
}

}  // namespace ditserve::pipeline
