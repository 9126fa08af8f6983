// Tombstoning a topic's producer on the lookupds (nsqadmin's red cross next to a broker
// on the topic and node pages): the lookupds stop handing that broker out for the topic.
import {apiUrl, del} from '../api.js';
import {confirmAction} from '../confirm.js';
import {h} from '../dom.js';

/**
 * The tombstone button for broker row.node and topic, or null where it does not apply
 * (no lookupds configured, not an admin, a failed or total row).
 */
export function tombstoneButton(ctx, row, topic) {
  const lookupds = ctx.config.nsqlookupd || [];
  if (!ctx.config.is_admin || !lookupds.length || row.failed || row.total) return null;
  const node = row.node;
  const button = h('button.icon-btn.tombstone', {
    type: 'button', title: `Tombstone ${node} for topic ${topic} on the lookupds`,
    'aria-label': `Tombstone ${node}`, dataset: {node, topic},
  }, '✕');
  button.addEventListener('click', async (event) => {
    event.preventDefault();
    const ok = await confirmAction('Tombstone topic producer',
      `Tombstone broker ${node} for topic "${topic}"? The lookupds stop listing it for this topic `
        + 'and the topic is deleted on that broker.',
      'Tombstone');
    if (!ok) return;
    button.disabled = true;
    try {
      await del(apiUrl('/nodes', node), {topic});
      ctx.flash('success', null, `Tombstoned ${node} for topic "${topic}".`);
    } catch (err) {
      ctx.flash('error', 'Tombstone failed:', err.message);
    }
    ctx.refreshNow();
  });
  return button;
}
