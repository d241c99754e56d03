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
	{
		.name = "set-context",
		.fn = cmd_config_set_context,
		.summary = "create or update a context",
		.usage = config_set_context_usage,
		.examples = "  orchardctl config set-context dev --url https://127.0.0.1:8443 \\\n"
		            "      --api-key \"$ORCHARD_API_KEY\" --cacert var/tls/ca.crt\n"
		            "  orchardctl config set-context dev --api-key - < key.txt\n",
		.opts = config_set_context_opts,
		.arg = CLI_ARG_CONTEXT,
	},
	{
		.name = "use-context",
		.fn = cmd_config_use_context,
		.summary = "make a context the current one",
		.usage = config_use_context_usage,
		.examples = "  orchardctl config use-context prod\n",
		.arg = CLI_ARG_CONTEXT,
	},
	{
		.name = "get-contexts",
		.fn = cmd_config_get_contexts,
		.summary = "list the contexts",
		.usage = config_get_contexts_usage,
		.examples = "  orchardctl config get-contexts\n",
		.opts = config_get_contexts_opts,
	},
	{
		.name = "current-context",
		.fn = cmd_config_current_context,
		.summary = "print the current context's name",
		.usage = config_current_context_usage,
		.examples = "  orchardctl config current-context\n",
	},
	{
		.name = "view",
		.fn = cmd_config_view,
		.summary = "show the config file, keys masked",
		.usage = config_view_usage,
		.examples = "  orchardctl config view\n  orchardctl config view --raw > backup.json\n",
		.opts = config_view_opts,
	},
	{
		.name = "delete-context",
		.fn = cmd_config_delete_context,
		.summary = "remove a context",
		.usage = config_delete_context_usage,
		.examples = "  orchardctl config delete-context old\n",
		.arg = CLI_ARG_CONTEXT,
	},
	{ .name = NULL },
};

static const struct cli_cmd checkpoint_cmds[] = {
	{
		.name = "create",
		.fn = cmd_checkpoint_create,
		.summary = "checkpoint a sandbox now",
		.usage = checkpoint_create_usage,
		.examples = "  CK=$(orchardctl checkpoint create demo --name turn-3)\n",
		.opts = checkpoint_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "ls",
		.fn = cmd_checkpoint_ls,
		.summary = "list checkpoints",
		.usage = checkpoint_ls_usage,
		.examples = "  orchardctl checkpoint ls --sandbox demo\n",
		.opts = checkpoint_opts,
	},
	{
		.name = "get",
		.fn = cmd_checkpoint_get,
		.summary = "show a checkpoint",
		.usage = checkpoint_get_usage,
		.examples = "  orchardctl checkpoint get \"$CK\" -o json\n",
		.opts = checkpoint_opts,
	},
	{
		.name = "rm",
		.fn = cmd_checkpoint_rm,
		.summary = "delete checkpoints",
		.usage = checkpoint_rm_usage,
		.examples = "  orchardctl checkpoint rm \"$CK\"\n",
		.opts = checkpoint_opts,
	},
	{ .name = NULL },
};

static const struct cli_cmd jobs_cmds[] = {
	{
		.name = "ls",
		.fn = cmd_jobs_ls,
		.summary = "list a sandbox's jobs",
		.usage = jobs_ls_usage,
		.examples = "  orchardctl jobs ls demo\n  orchardctl jobs ls demo -o json\n",
		.opts = jobs_ls_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "get",
		.fn = cmd_jobs_get,
		.summary = "show a job",
		.usage = jobs_get_usage,
		.examples = "  orchardctl jobs get 5e121cfa-860f-4425-87fa-b2e5f1418161\n"
		            "  orchardctl jobs get \"$JOB\" -o json | jq .exit_code\n",
		.opts = jobs_get_opts,
	},
	{
		.name = "wait",
		.fn = cmd_jobs_wait,
		.summary = "wait for a job and exit with its exit code",
		.usage = jobs_wait_usage,
		.examples = "  JOB=$(orchardctl exec --detach demo -- make test)\n"
		            "  orchardctl jobs wait \"$JOB\" --timeout 600; echo \"make exited $?\"\n",
		.opts = jobs_wait_opts,
	},
	{
		.name = "logs",
		.fn = cmd_jobs_logs,
		.summary = "print a job's stdout and stderr",
		.usage = jobs_logs_usage,
		.examples = "  orchardctl jobs logs \"$JOB\"\n  orchardctl jobs logs --follow \"$JOB\" 2>/dev/null\n",
		.opts = jobs_logs_opts,
	},
	{
		.name = "cancel",
		.fn = cmd_jobs_cancel,
		.summary = "cancel a queued or running job",
		.usage = jobs_cancel_usage,
		.examples = "  orchardctl jobs cancel \"$JOB\"\n",
		.opts = common_opts,
	},
	{ .name = NULL },
};

static const struct cli_cmd files_cmds[] = {
	{
		.name = "ls",
		.fn = cmd_files_ls,
		.summary = "list a directory of a sandbox",
		.usage = files_ls_usage,
		.examples = "  orchardctl files ls demo\n  orchardctl files ls demo /etc -q\n"
		            "  orchardctl files ls demo src -o json | jq -r '.files[].name'\n",
		.opts = files_ls_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "cat",
		.fn = cmd_files_cat,
		.summary = "print files of a sandbox",
		.usage = files_cat_usage,
		.examples = "  orchardctl files cat demo /etc/os-release\n  orchardctl files cat demo out.json | jq .\n",
		.opts = common_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "rm",
		.fn = cmd_files_rm,
		.summary = "remove files or directories in a sandbox",
		.usage = files_rm_usage,
		.examples = "  orchardctl files rm demo tmp.txt\n  orchardctl files rm -rf demo build\n",
		.opts = files_rm_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "mkdir",
		.fn = cmd_files_mkdir,
		.summary = "create directories in a sandbox",
		.usage = files_mkdir_usage,
		.examples = "  orchardctl files mkdir demo out\n  orchardctl files mkdir -p -m 0700 demo /workspace/a/b\n",
		.opts = files_mkdir_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{ .name = NULL },
};

static const struct cli_cmd patch_cmds[] = {
	{
		.name = "apply",
		.fn = cmd_patch_apply,
		.summary = "apply a patch to the working tree",
		.usage = patch_apply_usage,
		.examples = "  orchardctl patch apply demo fix.patch\n"
		            "  git diff | orchardctl patch apply demo --check\n",
		.opts = patch_apply_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "diff",
		.fn = cmd_patch_diff,
		.summary = "print the working tree's changes as a patch",
		.usage = patch_diff_usage,
		.examples = "  orchardctl patch diff demo > model.patch\n"
		            "  orchardctl patch diff demo --cwd /workspace/repo -o json | jq .files\n",
		.opts = patch_diff_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "reset",
		.fn = cmd_patch_reset,
		.summary = "reset the working tree to a commit",
		.usage = patch_reset_usage,
		.examples = "  orchardctl patch reset demo\n  orchardctl patch reset demo HEAD~1 --remove-ignored\n",
		.opts = patch_reset_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{ .name = NULL },
};

static const struct cli_cmd trajectory_cmds[] = {
	{
		.name = "export",
		.fn = cmd_trajectory_export,
		.summary = "export trajectories as JSON lines",
		.usage = trajectory_export_usage,
		.examples = "  orchardctl trajectory export demo -o demo.jsonl\n"
		            "  orchardctl trajectory export --all -l run=42 --limit 500 -o run42.jsonl\n",
		.opts = trajectory_export_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "tree",
		.fn = cmd_trajectory_tree,
		.summary = "print the fork tree rooted at a sandbox",
		.usage = trajectory_tree_usage,
		.examples = "  orchardctl trajectory tree demo\n"
		            "  orchardctl trajectory tree demo -o json\n",
		.opts = trajectory_tree_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{ .name = NULL },
};

static const struct cli_cmd keys_cmds[] = {
	{
		.name = "create",
		.fn = cmd_keys_create,
		.summary = "create an API key for a tenant",
		.usage = keys_create_usage,
		.examples = "  KEY=$(orchardctl keys create --tenant research --name ci)\n"
		            "  orchardctl keys create --tenant ops --admin -o json\n",
		.opts = keys_create_opts,
	},
	{
		.name = "ls",
		.fn = cmd_keys_ls,
		.summary = "list API keys",
		.usage = keys_ls_usage,
		.examples = "  orchardctl keys ls\n  orchardctl keys ls --tenant research -o json\n",
		.opts = keys_ls_opts,
	},
	{
		.name = "revoke",
		.fn = cmd_keys_revoke,
		.summary = "revoke API keys",
		.usage = keys_revoke_usage,
		.examples = "  orchardctl keys revoke 0123456789ab\n",
		.opts = common_opts,
	},
	{ .name = NULL },
};

static const struct cli_cmd tenants_cmds[] = {
	{
		.name = "ls",
		.fn = cmd_tenants_ls,
		.summary = "list tenants with usage and quotas",
		.usage = tenants_ls_usage,
		.examples = "  orchardctl tenants ls\n  orchardctl tenants ls -o json | jq '.tenants[].usage'\n",
		.opts = tenants_ls_opts,
	},
	{
		.name = "create",
		.fn = cmd_tenants_create,
		.summary = "create a tenant",
		.usage = tenants_create_usage,
		.examples = "  orchardctl tenants create research --max-sandboxes 100 --max-cpu 4 --max-memory 16Gi\n",
		.opts = tenants_set_opts,
	},
	{
		.name = "set",
		.fn = cmd_tenants_set,
		.summary = "change a tenant's quotas",
		.usage = tenants_set_usage,
		.examples = "  orchardctl tenants set research --max-sandboxes 200 --max-memory none\n",
		.opts = tenants_set_opts,
	},
	{
		.name = "delete",
		.fn = cmd_tenants_delete,
		.summary = "delete a tenant and revoke its keys",
		.usage = tenants_delete_usage,
		.examples = "  orchardctl tenants delete research\n"
		            "  orchardctl tenants delete research --force   # and its sandboxes\n",
		.opts = tenants_delete_opts,
	},
	{ .name = NULL },
};

const struct cli_cmd cli_commands[] = {
	{
		.name = "create",
		.fn = cmd_create,
		.summary = "create a sandbox",
		.usage = create_usage,
		.examples = "  orchardctl create --wait\n"
		            "  ID=$(orchardctl create host --cpu 1 --memory 1Gi --name demo --wait)\n"
		            "  orchardctl create --ttl 2h --idle-timeout 10m -l team=ml -l run=42 \\\n"
		            "      --env PYTHONUNBUFFERED=1 --workdir /workspace/src --wait -o json\n",
		.opts = create_opts,
	},
	{
		.name = "ls",
		.fn = cmd_ls,
		.summary = "list sandboxes",
		.usage = ls_usage,
		.examples = "  orchardctl ls\n"
		            "  orchardctl ls --status ready -l team=ml -o wide\n"
		            "  orchardctl ls -q | xargs orchardctl rm\n"
		            "  orchardctl ls -w -o json -l run=42\n",
		.opts = ls_opts,
	},
	{
		.name = "get",
		.fn = cmd_get,
		.summary = "show a sandbox",
		.usage = get_usage,
		.examples = "  orchardctl get demo\n  orchardctl get demo -o json | jq -r .status\n",
		.opts = get_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "describe",
		.fn = cmd_describe,
		.summary = "show a sandbox in detail, with its recent jobs",
		.usage = describe_usage,
		.examples = "  orchardctl describe demo\n",
		.opts = describe_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "wait",
		.fn = cmd_wait,
		.summary = "wait until a sandbox is ready",
		.usage = wait_usage,
		.examples = "  orchardctl wait demo --timeout 60\n",
		.opts = wait_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "exec",
		.fn = cmd_exec,
		.summary = "run a command in a sandbox",
		.usage = exec_usage,
		.examples = "  orchardctl exec demo -- echo hi\n"
		            "  orchardctl exec demo -- sh -c 'ls /workspace | wc -l'\n"
		            "  orchardctl exec demo --timeout 10 -e DEBUG=1 -w /tmp -- make test\n"
		            "  printf 'print(6*7)\\n' | orchardctl exec demo -- python3 -\n"
		            "  orchardctl exec demo --login -- 'conda activate py311 && pytest -q'\n"
		            "  JOB=$(orchardctl exec --detach demo -- sleep 60)\n",
		.opts = exec_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "shell",
		.fn = cmd_shell,
		.summary = "open an interactive terminal in a sandbox",
		.usage = shell_usage,
		.examples = "  orchardctl shell demo\n"
		            "  orchardctl shell demo -w /tmp -e LANG=C.UTF-8\n"
		            "  orchardctl shell demo -- python3\n",
		.opts = shell_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "cp",
		.fn = cmd_cp,
		.summary = "copy files and directories to and from a sandbox",
		.usage = cp_usage,
		.examples = "  orchardctl cp model.bin demo:/workspace/\n"
		            "  orchardctl cp ./src demo:/workspace/src\n"
		            "  orchardctl cp demo:/workspace/out ./out\n"
		            "  orchardctl cp demo:/var/log/app.log - | tail\n"
		            "  echo 'print(1)' | orchardctl cp - demo:main.py\n"
		            "  tar -C src -c . | orchardctl cp --tar - demo:/workspace/src\n",
		.opts = cp_opts,
		.arg = CLI_ARG_FILE,
	},
	{
		.name = "files",
		.summary = "list, print, remove and create files in a sandbox",
		.usage = files_usage,
		.examples = "  orchardctl files ls demo\n  orchardctl files cat demo /etc/hostname\n",
		.sub = files_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "patch",
		.summary = "apply, show and reset changes to a git working tree",
		.usage = patch_usage,
		.examples = "  orchardctl patch apply demo fix.patch\n  orchardctl patch diff demo > model.patch\n"
		            "  orchardctl patch reset demo\n",
		.sub = patch_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "jobs",
		.summary = "inspect, wait for and cancel jobs",
		.usage = jobs_usage,
		.examples = "  orchardctl jobs ls demo\n  orchardctl jobs wait \"$JOB\" && orchardctl jobs logs \"$JOB\"\n",
		.sub = jobs_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "trajectory",
		.summary = "export recorded trajectories",
		.usage = trajectory_usage,
		.examples = "  orchardctl trajectory export demo > demo.jsonl\n",
		.sub = trajectory_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "replay",
		.fn = cmd_replay,
		.summary = "replay trajectories into fresh sandboxes and compare",
		.usage = replay_usage,
		.examples = "  orchardctl replay demo.jsonl\n"
		            "  orchardctl replay run42.jsonl --parallel 16 --compare exit-code\n"
		            "  orchardctl replay demo.jsonl --image host --keep -o json | jq .summary\n",
		.opts = replay_opts,
	},
	{
		.name = "rm",
		.fn = cmd_rm,
		.summary = "delete sandboxes",
		.usage = rm_usage,
		.examples = "  orchardctl rm demo other\n"
		            "  orchardctl rm --all -l run=42        # asks first\n"
		            "  orchardctl rm --all -l run=42 -y     # in scripts\n",
		.opts = rm_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "checkpoint",
		.summary = "checkpoints of a sandbox's state",
		.usage = checkpoint_usage,
		.examples = "  orchardctl checkpoint create demo\n",
		.sub = checkpoint_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "fork",
		.fn = cmd_fork,
		.summary = "new sandboxes from a checkpoint or a sandbox",
		.usage = fork_usage,
		.examples = "  orchardctl fork \"$CK\" -n 8\n  orchardctl fork demo\n  orchardctl fork demo --step 2 -n 4\n",
		.opts = checkpoint_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "pause",
		.fn = cmd_pause,
		.summary = "freeze a sandbox's processes",
		.usage = pause_usage,
		.examples = "  orchardctl pause demo\n",
		.opts = checkpoint_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "resume",
		.fn = cmd_resume,
		.summary = "thaw a paused sandbox",
		.usage = resume_usage,
		.examples = "  orchardctl resume demo\n",
		.opts = checkpoint_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "heartbeat",
		.fn = cmd_heartbeat,
		.summary = "keep a sandbox from its idle timeout",
		.usage = heartbeat_usage,
		.examples = "  while sleep 60; do orchardctl heartbeat demo; done\n",
		.opts = heartbeat_opts,
		.arg = CLI_ARG_SANDBOX,
	},
	{
		.name = "stats",
		.fn = cmd_stats,
		.summary = "dashboard summaries: usage, latency, failures",
		.usage = stats_usage,
		.examples = "  orchardctl stats\n"
		            "  orchardctl stats --tenant research -o json | jq .failure_reasons\n",
		.opts = stats_opts,
	},
	{
		.name = "keys",
		.summary = "create, list and revoke API keys (admin)",
		.usage = keys_usage,
		.examples = "  orchardctl keys ls\n  orchardctl keys revoke 0123456789ab\n",
		.sub = keys_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "tenants",
		.summary = "list, create, limit and delete tenants (admin)",
		.usage = tenants_usage,
		.examples = "  orchardctl tenants ls\n  orchardctl tenants create research --max-sandboxes 100\n",
		.sub = tenants_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "config",
		.summary = "manage contexts in the config file",
		.usage = config_usage,
		.examples = "  orchardctl config set-context dev --url https://127.0.0.1:8443 --api-key \"$KEY\"\n"
		            "  orchardctl config use-context dev\n  orchardctl config view\n",
		.sub = config_cmds,
		.arg = CLI_ARG_COMMAND,
	},
	{
		.name = "completion",
		.fn = cmd_completion,
		.summary = "print a shell completion script",
		.usage = completion_usage,
		.examples = "  . <(orchardctl completion bash)\n"
		            "  orchardctl completion zsh > \"${fpath[1]}/_orchardctl\"\n"
		            "  orchardctl completion fish > ~/.config/fish/completions/orchardctl.fish\n",
		.opts = completion_opts,
		.arg = CLI_ARG_SHELL,
	},
	{
		.name = "version",
		.fn = cmd_version,
		.summary = "show the client (and server) version",
		.usage = version_usage,
		.examples = "  orchardctl version\n  orchardctl version -o jsonpath=.server.version\n",
		.opts = version_opts,
	},
	{
		.name = "help",
		.fn = cmd_help,
		.summary = "show help for a command",
		.usage = help_usage,
		.examples = "  orchardctl help exec\n  orchardctl help jobs wait\n  orchardctl exec --help\n",
		.arg = CLI_ARG_COMMAND,
	},
	{ .name = NULL },
};

const struct option common_opts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };
