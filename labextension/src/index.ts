/**
 * gpugeek-jupyter: a left-sidebar panel listing every GPU pool the server
 * knows (whoever launched it), with cost, utilisation, a launch form and
 * the distributed jobs run on the pools.
 */

import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  Notification,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { historyIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { GpugeekApi } from './api';
import { CommandIDs } from './commands';
import { gpuIcon } from './icons';
import { insertPoolMagic, notebookOf, poolMagic } from './notebook';
import { DEFAULT_REFRESH_PERIOD_SECONDS, GpugeekPanel, PANEL_ID } from './panel';
import { JobTab, jobTabId } from './jobTab';
import { monitorId, PoolMonitor } from './monitorWidget';
import { makeServerRequest } from './request';
import { SCHEDULES_PANEL_ID, SchedulesPanel } from './schedulesPanel';

const PLUGIN_ID = 'gpugeek-jupyter:plugin';
const PALETTE_CATEGORY = 'GPU pools';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A side panel for GPU pools: launch, cost, utilisation, stop, and jobs.',
  autoStart: true,
  optional: [ISettingRegistry, ILayoutRestorer, ILabShell, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    labShell: ILabShell | null,
    palette: ICommandPalette | null
  ) => {
    const panel = new GpugeekPanel({
      api: new GpugeekApi(makeServerRequest()),
      commands: app.commands
    });
    panel.title.icon = gpuIcon;
    panel.title.caption = 'GPU pools';
    app.shell.add(panel, 'left', { rank: 750 });
    restorer?.add(panel, PANEL_ID);

    const schedules = new SchedulesPanel(makeServerRequest());
    schedules.title.icon = historyIcon;
    schedules.title.caption = 'Scheduled runs';
    app.shell.add(schedules, 'left', { rank: 751 });
    restorer?.add(schedules, SCHEDULES_PANEL_ID);

    const lastNotebook = trackLastNotebook(app, labShell);
    addCommands(app, panel, lastNotebook);
    addMonitor(app, new GpugeekApi(makeServerRequest()), restorer);
    addJobTabs(app, new GpugeekApi(makeServerRequest()), restorer);
    if (palette) {
      for (const command of [
        CommandIDs.showPanel,
        CommandIDs.refreshPools,
        CommandIDs.openMonitor,
        CommandIDs.openJob
      ]) {
        palette.addItem({ command, category: PALETTE_CATEGORY });
      }
    }

    if (settingRegistry) {
      void loadSettings(settingRegistry, panel);
    }
  }
};

function addCommands(
  app: JupyterFrontEnd,
  panel: GpugeekPanel,
  lastNotebook: () => Widget | null
): void {
  app.commands.addCommand(CommandIDs.showPanel, {
    label: 'Show GPU Pools Panel',
    execute: () => app.shell.activateById(panel.id)
  });
  app.commands.addCommand(CommandIDs.refreshPools, {
    label: 'Refresh GPU Pools',
    execute: () => panel.refresh()
  });
  app.commands.addCommand(CommandIDs.stopPool, {
    label: args => (args.name ? `Stop Pool ${args.name}` : 'Stop Pool'),
    execute: args => panel.stopPool(String(args.name))
  });
  app.commands.addCommand(CommandIDs.usePool, {
    label: args => (args.name ? `Use Pool ${args.name} in Notebook` : 'Use Pool in Notebook'),
    execute: args => {
      const name = String(args.name);
      const widget = lastNotebook();
      const notebook = notebookOf(widget);
      if (!widget || !notebook) {
        Notification.warning(`Open a notebook to use pool ${name}: run ${poolMagic(name)} in it.`, {
          autoClose: 5000
        });
        return;
      }
      insertPoolMagic(notebook, name);
      app.shell.activateById(widget.id);
    }
  });
}

/** What one kind of main-area tab needs: its key (asked for when missing) and how to make one. */
interface ITabKind<T extends Widget> {
  tracker: WidgetTracker<MainAreaWidget<T>>;
  /** The key of a tab's content (a pool's name, a job's id). */
  keyOf: (content: T) => string;
  ask: { title: string; placeholder: string };
  make: (key: string) => { content: T; id: string; label: string };
}

/**
 * Open the tab of `key` (asked for when empty): the open one is shown again,
 * else a new one docks to the right of the current tab.
 */
async function openTab<T extends Widget>(
  app: JupyterFrontEnd,
  kind: ITabKind<T>,
  given: string
): Promise<MainAreaWidget<T> | undefined> {
  let key = given;
  if (!key) {
    const asked = await InputDialog.getText(kind.ask);
    key = asked.button.accept ? (asked.value ?? '').trim() : '';
    if (!key) {
      return undefined;
    }
  }
  const open = kind.tracker.find(widget => kind.keyOf(widget.content) === key);
  if (open) {
    app.shell.activateById(open.id);
    return open;
  }
  const made = kind.make(key);
  const widget = new MainAreaWidget({ content: made.content });
  widget.id = made.id;
  widget.title.label = made.label;
  widget.title.icon = gpuIcon;
  widget.title.closable = true;
  void kind.tracker.add(widget);
  if (!widget.isAttached) {
    app.shell.add(widget, 'main', { mode: 'split-right' });
  }
  app.shell.activateById(widget.id);
  return widget;
}

/**
 * The pools' monitors as main-area tabs, one per pool, restored with the
 * layout by the pool's name and with the window picked in them.
 */
function addMonitor(app: JupyterFrontEnd, api: GpugeekApi, restorer: ILayoutRestorer | null): void {
  const tracker = new WidgetTracker<MainAreaWidget<PoolMonitor>>({ namespace: 'gpugeek-monitor' });
  const keep = (changed: PoolMonitor): void => {
    const kept = tracker.find(widget => widget.content === changed);
    if (kept) {
      void tracker.save(kept); // the restored tab keeps the window
    }
  };
  app.commands.addCommand(CommandIDs.openMonitor, {
    label: args => (args.name ? `Open Monitor of Pool ${args.name}` : 'Open Pool Monitor…'),
    execute: args =>
      openTab(
        app,
        {
          tracker,
          keyOf: monitor => monitor.poolName,
          ask: { title: 'Monitor of pool', placeholder: 'pool name, e.g. dev' },
          make: name => ({
            content: new PoolMonitor(api, name, {
              windowS: typeof args.window === 'number' ? args.window : undefined,
              onWindowChanged: keep
            }),
            id: monitorId(name),
            label: `Monitor: ${name}`
          })
        },
        args.name ? String(args.name) : ''
      )
  });
  void restorer?.restore(tracker, {
    command: CommandIDs.openMonitor,
    args: widget => ({ name: widget.content.poolName, window: widget.content.windowS }),
    name: widget => widget.content.poolName
  });
}

/**
 * Jobs as main-area tabs (their output and logged values), one per job,
 * restored with the layout by the job's id.
 */
function addJobTabs(app: JupyterFrontEnd, api: GpugeekApi, restorer: ILayoutRestorer | null): void {
  const tracker = new WidgetTracker<MainAreaWidget<JobTab>>({ namespace: 'gpugeek-job' });
  app.commands.addCommand(CommandIDs.openJob, {
    label: args => (args.id ? `Open Job ${args.id}` : 'Open Job Output…'),
    execute: args =>
      openTab(
        app,
        {
          tracker,
          keyOf: tab => tab.jobId,
          ask: { title: 'Open job', placeholder: 'job id, e.g. job-1a2b3c4da910' },
          make: id => ({ content: new JobTab(api, id), id: jobTabId(id), label: `Job ${id}` })
        },
        args.id ? String(args.id) : ''
      )
  });
  void restorer?.restore(tracker, {
    command: CommandIDs.openJob,
    args: widget => ({ id: widget.content.jobId }),
    name: widget => widget.content.jobId
  });
}

/**
 * The notebook "Use in notebook" writes into: the current main-area widget
 * when it is a notebook, else the last notebook that was current.
 */
function trackLastNotebook(app: JupyterFrontEnd, labShell: ILabShell | null): () => Widget | null {
  let last: Widget | null = null;
  labShell?.currentChanged.connect((_, change) => {
    if (notebookOf(change.newValue)) {
      last = change.newValue;
    }
  });
  return () => {
    const current = app.shell.currentWidget;
    if (notebookOf(current)) {
      return current;
    }
    return last && !last.isDisposed ? last : null;
  };
}

async function loadSettings(registry: ISettingRegistry, panel: GpugeekPanel): Promise<void> {
  try {
    const settings = await registry.load(PLUGIN_ID);
    const apply = (): void => {
      const seconds = settings.get('refreshPeriodSeconds').composite;
      panel.refreshPeriodSeconds =
        typeof seconds === 'number' ? seconds : DEFAULT_REFRESH_PERIOD_SECONDS;
    };
    apply();
    settings.changed.connect(apply);
  } catch (error) {
    console.warn(`gpugeek: could not load settings for ${PLUGIN_ID}; using defaults`, error);
  }
}

export default plugin;
