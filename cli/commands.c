/*
 * The commands table: dispatch (main.c), `help` and `--help` (help.c),
 * shell completion (completion.c) and docs/cli.md's reference
 * (`orchardctl help --markdown`) all come from here, so they cannot drift
 * apart. Usage texts and option tables live beside each command's code.
 */
#include <stddef.h>

#include "cli.h"
#include "replay.h"
#include "stats.h"

const char cli_main_usage[] =
	"usage: orchardctl [--url URL] [--api-key KEY] [--cacert FILE] [--context NAME]\n"
	"                  [-v|--debug] [--no-headers] COMMAND [ARGS]\n"
	"\n"
	"Configuration, first found wins (docs/cli.md):\n"
	"  --url URL, --api-key KEY, --cacert FILE   flags (also after COMMAND)\n"
	"  --context NAME (or $ORCHARD_CONTEXT)      a context of the config file\n"
	"  $ORCHARD_URL, $ORCHARD_API_KEY, $ORCHARD_CACERT\n"
	"  the current context of ~/.config/orchard/config ($ORCHARD_CONFIG)\n"
	"\n"
	"-v, --debug (also after COMMAND; or $ORCHARD_DEBUG=1): each HTTP request on\n"
	"stderr with its method, URL, status, request id and timings; never the key.\n"
	"\n"
	"Exit status (as docker's): 0 ok; 125 orchardctl's own error (usage, an unknown\n"
	"sandbox, an API or network error); exec, jobs wait and shell exit with the\n"
	"command's own status: 126 it could not be run, 127 it was not found, 124 it\n"
	"timed out, else its exit code. replay exits 1 when a step diverged.\n"
	"\n"
	"Output: every command that prints an object or a list takes -o json, -o yaml\n"
	"or -o jsonpath=EXPR (.a.b, [N], [*]; e.g. -o jsonpath='{.sandboxes[*].sandbox_id}'),\n"
	"the listings also -o wide and --no-headers; -o=json works too.\n";

static const struct cli_cmd config_cmds[] = {
	{ "set-context", cmd_config_set_context, "create or update a context", config_set_context_usage,
	  "  orchardctl config set-context dev --url https://127.0.0.1:8443 \\\n"
	  "      --api-key \"$ORCHARD_API_KEY\" --cacert var/tls/ca.crt\n"
	  "  orchardctl config set-context dev --api-key - < key.txt\n",
	  config_set_context_opts, NULL, CLI_ARG_CONTEXT },
	{ "use-context", cmd_config_use_context, "make a context the current one", config_use_context_usage,
	  "  orchardctl config use-context prod\n", NULL, NULL, CLI_ARG_CONTEXT },
	{ "get-contexts", cmd_config_get_contexts, "list the contexts", config_get_contexts_usage,
	  "  orchardctl config get-contexts\n", config_get_contexts_opts, NULL, CLI_ARG_NONE },
	{ "current-context", cmd_config_current_context, "print the current context's name",
	  config_current_context_usage, "  orchardctl config current-context\n", NULL, NULL,
	  CLI_ARG_NONE },
	{ "view", cmd_config_view, "show the config file, keys masked", config_view_usage,
	  "  orchardctl config view\n  orchardctl config view --raw > backup.json\n",
	  config_view_opts, NULL, CLI_ARG_NONE },
	{ "delete-context", cmd_config_delete_context, "remove a context", config_delete_context_usage,
	  "  orchardctl config delete-context old\n", NULL, NULL, CLI_ARG_CONTEXT },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

static const struct cli_cmd checkpoint_cmds[] = {
	{ "create", cmd_checkpoint_create, "checkpoint a sandbox now", checkpoint_create_usage,
	  "  CK=$(orchardctl checkpoint create demo --name turn-3)\n", checkpoint_opts, NULL,
	  CLI_ARG_SANDBOX },
	{ "ls", cmd_checkpoint_ls, "list checkpoints", checkpoint_ls_usage,
	  "  orchardctl checkpoint ls --sandbox demo\n", checkpoint_opts, NULL, CLI_ARG_NONE },
	{ "get", cmd_checkpoint_get, "show a checkpoint", checkpoint_get_usage,
	  "  orchardctl checkpoint get \"$CK\" -o json\n", checkpoint_opts, NULL, CLI_ARG_NONE },
	{ "rm", cmd_checkpoint_rm, "delete checkpoints", checkpoint_rm_usage,
	  "  orchardctl checkpoint rm \"$CK\"\n", checkpoint_opts, NULL, CLI_ARG_NONE },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

static const struct cli_cmd jobs_cmds[] = {
	{ "ls", cmd_jobs_ls, "list a sandbox's jobs", jobs_ls_usage,
	  "  orchardctl jobs ls demo\n  orchardctl jobs ls demo -o json\n",
	  jobs_ls_opts, NULL, CLI_ARG_SANDBOX },
	{ "get", cmd_jobs_get, "show a job", jobs_get_usage,
	  "  orchardctl jobs get 5e121cfa-860f-4425-87fa-b2e5f1418161\n"
	  "  orchardctl jobs get \"$JOB\" -o json | jq .exit_code\n",
	  jobs_get_opts, NULL, CLI_ARG_NONE },
	{ "wait", cmd_jobs_wait, "wait for a job and exit with its exit code", jobs_wait_usage,
	  "  JOB=$(orchardctl exec --detach demo -- make test)\n"
	  "  orchardctl jobs wait \"$JOB\" --timeout 600; echo \"make exited $?\"\n",
	  jobs_wait_opts, NULL, CLI_ARG_NONE },
	{ "logs", cmd_jobs_logs, "print a job's stdout and stderr", jobs_logs_usage,
	  "  orchardctl jobs logs \"$JOB\"\n  orchardctl jobs logs --follow \"$JOB\" 2>/dev/null\n",
	  jobs_logs_opts, NULL, CLI_ARG_NONE },
	{ "cancel", cmd_jobs_cancel, "cancel a queued or running job", jobs_cancel_usage,
	  "  orchardctl jobs cancel \"$JOB\"\n", common_opts, NULL, CLI_ARG_NONE },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

static const struct cli_cmd files_cmds[] = {
	{ "ls", cmd_files_ls, "list a directory of a sandbox", files_ls_usage,
	  "  orchardctl files ls demo\n  orchardctl files ls demo /etc -q\n"
	  "  orchardctl files ls demo src -o json | jq -r '.files[].name'\n",
	  files_ls_opts, NULL, CLI_ARG_SANDBOX },
	{ "cat", cmd_files_cat, "print files of a sandbox", files_cat_usage,
	  "  orchardctl files cat demo /etc/os-release\n  orchardctl files cat demo out.json | jq .\n",
	  common_opts, NULL, CLI_ARG_SANDBOX },
	{ "rm", cmd_files_rm, "remove files or directories in a sandbox", files_rm_usage,
	  "  orchardctl files rm demo tmp.txt\n  orchardctl files rm -rf demo build\n",
	  files_rm_opts, NULL, CLI_ARG_SANDBOX },
	{ "mkdir", cmd_files_mkdir, "create directories in a sandbox", files_mkdir_usage,
	  "  orchardctl files mkdir demo out\n  orchardctl files mkdir -p -m 0700 demo /workspace/a/b\n",
	  files_mkdir_opts, NULL, CLI_ARG_SANDBOX },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

static const struct cli_cmd patch_cmds[] = {
	{ "apply", cmd_patch_apply, "apply a patch to the working tree", patch_apply_usage,
	  "  orchardctl patch apply demo fix.patch\n"
	  "  git diff | orchardctl patch apply demo --check\n",
	  patch_apply_opts, NULL, CLI_ARG_SANDBOX },
	{ "diff", cmd_patch_diff, "print the working tree's changes as a patch", patch_diff_usage,
	  "  orchardctl patch diff demo > model.patch\n"
	  "  orchardctl patch diff demo --cwd /workspace/repo -o json | jq .files\n",
	  patch_diff_opts, NULL, CLI_ARG_SANDBOX },
	{ "reset", cmd_patch_reset, "reset the working tree to a commit", patch_reset_usage,
	  "  orchardctl patch reset demo\n  orchardctl patch reset demo HEAD~1 --remove-ignored\n",
	  patch_reset_opts, NULL, CLI_ARG_SANDBOX },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

static const struct cli_cmd trajectory_cmds[] = {
	{ "export", cmd_trajectory_export, "export trajectories as JSON lines", trajectory_export_usage,
	  "  orchardctl trajectory export demo -o demo.jsonl\n"
	  "  orchardctl trajectory export --all -l run=42 --limit 500 -o run42.jsonl\n",
	  trajectory_export_opts, NULL, CLI_ARG_SANDBOX },
	{ "tree", cmd_trajectory_tree, "print the fork tree rooted at a sandbox", trajectory_tree_usage,
	  "  orchardctl trajectory tree demo\n"
	  "  orchardctl trajectory tree demo -o json\n",
	  trajectory_tree_opts, NULL, CLI_ARG_SANDBOX },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

static const struct cli_cmd keys_cmds[] = {
	{ "ls", cmd_keys_ls, "list API keys", keys_ls_usage,
	  "  orchardctl keys ls\n  orchardctl keys ls --tenant research -o json\n",
	  keys_ls_opts, NULL, CLI_ARG_NONE },
	{ "revoke", cmd_keys_revoke, "revoke API keys", keys_revoke_usage,
	  "  orchardctl keys revoke 0123456789ab\n", common_opts, NULL, CLI_ARG_NONE },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

static const struct cli_cmd tenants_cmds[] = {
	{ "ls", cmd_tenants_ls, "list tenants with usage and quotas", tenants_ls_usage,
	  "  orchardctl tenants ls\n  orchardctl tenants ls -o json | jq '.tenants[].usage'\n",
	  tenants_ls_opts, NULL, CLI_ARG_NONE },
	{ "create", cmd_tenants_create, "create a tenant", tenants_create_usage,
	  "  orchardctl tenants create research --max-sandboxes 100 --max-cpu 4 --max-memory 16Gi\n",
	  tenants_set_opts, NULL, CLI_ARG_NONE },
	{ "set", cmd_tenants_set, "change a tenant's quotas", tenants_set_usage,
	  "  orchardctl tenants set research --max-sandboxes 200 --max-memory none\n",
	  tenants_set_opts, NULL, CLI_ARG_NONE },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

const struct cli_cmd cli_commands[] = {
	{ "create", cmd_create, "create a sandbox", create_usage,
	  "  orchardctl create --wait\n"
	  "  ID=$(orchardctl create host --cpu 1 --memory 1Gi --name demo --wait)\n"
	  "  orchardctl create --ttl 2h --idle-timeout 10m -l team=ml -l run=42 \\\n"
	  "      --env PYTHONUNBUFFERED=1 --workdir /workspace/src --wait -o json\n",
	  create_opts, NULL, CLI_ARG_NONE },
	{ "ls", cmd_ls, "list sandboxes", ls_usage,
	  "  orchardctl ls\n"
	  "  orchardctl ls --status ready -l team=ml -o wide\n"
	  "  orchardctl ls -q | xargs orchardctl rm\n"
	  "  orchardctl ls -w -o json -l run=42\n",
	  ls_opts, NULL, CLI_ARG_NONE },
	{ "get", cmd_get, "show a sandbox", get_usage,
	  "  orchardctl get demo\n  orchardctl get demo -o json | jq -r .status\n",
	  get_opts, NULL, CLI_ARG_SANDBOX },
	{ "describe", cmd_describe, "show a sandbox in detail, with its recent jobs", describe_usage,
	  "  orchardctl describe demo\n", describe_opts, NULL, CLI_ARG_SANDBOX },
	{ "wait", cmd_wait, "wait until a sandbox is ready", wait_usage,
	  "  orchardctl wait demo --timeout 60\n", wait_opts, NULL, CLI_ARG_SANDBOX },
	{ "exec", cmd_exec, "run a command in a sandbox", exec_usage,
	  "  orchardctl exec demo -- echo hi\n"
	  "  orchardctl exec demo -- sh -c 'ls /workspace | wc -l'\n"
	  "  orchardctl exec demo --timeout 10 -e DEBUG=1 -w /tmp -- make test\n"
	  "  printf 'print(6*7)\\n' | orchardctl exec demo -- python3 -\n"
	  "  orchardctl exec demo --login -- 'conda activate py311 && pytest -q'\n"
	  "  JOB=$(orchardctl exec --detach demo -- sleep 60)\n",
	  exec_opts, NULL, CLI_ARG_SANDBOX },
	{ "shell", cmd_shell, "open an interactive terminal in a sandbox", shell_usage,
	  "  orchardctl shell demo\n"
	  "  orchardctl shell demo -w /tmp -e LANG=C.UTF-8\n"
	  "  orchardctl shell demo -- python3\n",
	  shell_opts, NULL, CLI_ARG_SANDBOX },
	{ "cp", cmd_cp, "copy files and directories to and from a sandbox", cp_usage,
	  "  orchardctl cp model.bin demo:/workspace/\n"
	  "  orchardctl cp ./src demo:/workspace/src\n"
	  "  orchardctl cp demo:/workspace/out ./out\n"
	  "  orchardctl cp demo:/var/log/app.log - | tail\n"
	  "  echo 'print(1)' | orchardctl cp - demo:main.py\n"
	  "  tar -C src -c . | orchardctl cp --tar - demo:/workspace/src\n",
	  cp_opts, NULL, CLI_ARG_FILE },
	{ "files", NULL, "list, print, remove and create files in a sandbox", files_usage,
	  "  orchardctl files ls demo\n  orchardctl files cat demo /etc/hostname\n",
	  NULL, files_cmds, CLI_ARG_COMMAND },
	{ "patch", NULL, "apply, show and reset changes to a git working tree", patch_usage,
	  "  orchardctl patch apply demo fix.patch\n  orchardctl patch diff demo > model.patch\n"
	  "  orchardctl patch reset demo\n",
	  NULL, patch_cmds, CLI_ARG_COMMAND },
	{ "jobs", NULL, "inspect, wait for and cancel jobs", jobs_usage,
	  "  orchardctl jobs ls demo\n  orchardctl jobs wait \"$JOB\" && orchardctl jobs logs \"$JOB\"\n",
	  NULL, jobs_cmds, CLI_ARG_COMMAND },
	{ "trajectory", NULL, "export recorded trajectories", trajectory_usage,
	  "  orchardctl trajectory export demo > demo.jsonl\n", NULL, trajectory_cmds, CLI_ARG_COMMAND },
	{ "replay", cmd_replay, "replay trajectories into fresh sandboxes and compare", replay_usage,
	  "  orchardctl replay demo.jsonl\n"
	  "  orchardctl replay run42.jsonl --parallel 16 --compare exit-code\n"
	  "  orchardctl replay demo.jsonl --image host --keep -o json | jq .summary\n",
	  replay_opts, NULL, CLI_ARG_NONE },
	{ "rm", cmd_rm, "delete sandboxes", rm_usage,
	  "  orchardctl rm demo other\n"
	  "  orchardctl rm --all -l run=42        # asks first\n"
	  "  orchardctl rm --all -l run=42 -y     # in scripts\n",
	  rm_opts, NULL, CLI_ARG_SANDBOX },
	{ "checkpoint", NULL, "checkpoints of a sandbox's state", checkpoint_usage,
	  "  orchardctl checkpoint create demo\n", NULL, checkpoint_cmds, CLI_ARG_COMMAND },
	{ "fork", cmd_fork, "new sandboxes from a checkpoint or a sandbox", fork_usage,
	  "  orchardctl fork \"$CK\" -n 8\n  orchardctl fork demo\n", checkpoint_opts, NULL,
	  CLI_ARG_SANDBOX },
	{ "pause", cmd_pause, "freeze a sandbox's processes", pause_usage,
	  "  orchardctl pause demo\n", checkpoint_opts, NULL, CLI_ARG_SANDBOX },
	{ "resume", cmd_resume, "thaw a paused sandbox", resume_usage,
	  "  orchardctl resume demo\n", checkpoint_opts, NULL, CLI_ARG_SANDBOX },
	{ "heartbeat", cmd_heartbeat, "keep a sandbox from its idle timeout", heartbeat_usage,
	  "  while sleep 60; do orchardctl heartbeat demo; done\n", heartbeat_opts, NULL, CLI_ARG_SANDBOX },
	{ "stats", cmd_stats, "dashboard summaries: usage, latency, failures", stats_usage,
	  "  orchardctl stats\n"
	  "  orchardctl stats --tenant research -o json | jq .failure_reasons\n",
	  stats_opts, NULL, CLI_ARG_NONE },
	{ "keys", NULL, "list and revoke API keys (admin)", keys_usage,
	  "  orchardctl keys ls\n  orchardctl keys revoke 0123456789ab\n", NULL, keys_cmds, CLI_ARG_COMMAND },
	{ "tenants", NULL, "list, create and limit tenants (admin)", tenants_usage,
	  "  orchardctl tenants ls\n  orchardctl tenants create research --max-sandboxes 100\n",
	  NULL, tenants_cmds, CLI_ARG_COMMAND },
	{ "config", NULL, "manage contexts in the config file", config_usage,
	  "  orchardctl config set-context dev --url https://127.0.0.1:8443 --api-key \"$KEY\"\n"
	  "  orchardctl config use-context dev\n  orchardctl config view\n",
	  NULL, config_cmds, CLI_ARG_COMMAND },
	{ "completion", cmd_completion, "print a shell completion script", completion_usage,
	  "  . <(orchardctl completion bash)\n"
	  "  orchardctl completion zsh > \"${fpath[1]}/_orchardctl\"\n",
	  completion_opts, NULL, CLI_ARG_SHELL },
	{ "version", cmd_version, "show the client (and server) version", version_usage,
	  "  orchardctl version\n", common_opts, NULL, CLI_ARG_NONE },
	{ "help", cmd_help, "show help for a command", help_usage,
	  "  orchardctl help exec\n  orchardctl help jobs wait\n  orchardctl exec --help\n",
	  NULL, NULL, CLI_ARG_COMMAND },
	{ NULL, NULL, NULL, NULL, NULL, NULL, NULL, CLI_ARG_NONE },
};

const struct option common_opts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };
